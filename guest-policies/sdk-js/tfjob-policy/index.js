// The TFJob operator's policy SDK for JavaScript (componentize-js): `core.js` and the
// contract's `log` and `cluster` imports. Import this file from a policy; import `core.js` in
// Node tests.
import { log as witLog } from 'tfjob:policy/log@0.3.0';
import { get as witGet, list as witList } from 'tfjob:policy/cluster@0.3.0';
import { PolicyError } from './core.js';

export * from './core.js';

function write(level, message, fields = {}) {
  witLog(level, message, Object.entries(fields).map(([k, v]) => [String(k), String(v)]));
}

/** Structured records into the operator's log: `log.info('message', { job: ctx.jobName })`. */
export const log = {
  trace: (message, fields) => write('trace', message, fields),
  debug: (message, fields) => write('debug', message, fields),
  info: (message, fields) => write('info', message, fields),
  warn: (message, fields) => write('warn', message, fields),
  error: (message, fields) => write('error', message, fields),
};

/** A cluster read that gave no answer; `kind` is the contract's `read-error` case. The operator
 * ends such a call with the read's own category whatever the hook does next. */
export class ReadError extends PolicyError {
  constructor(kind, message) {
    super(`${kind}: ${message}`, 'failed');
    this.name = 'ReadError';
    this.kind = kind;
  }
}

function read(call) {
  try {
    return call();
  } catch (e) {
    // componentize-js throws the `read-error` value as the error's payload.
    const error = e?.payload ?? e;
    if (error && typeof error.tag === 'string') throw new ReadError(error.tag, String(error.val));
    throw e;
  }
}

/** Reads of the cluster objects the policy declared (`reads` in its manifest), as plain
 * objects (the Kubernetes API's JSON, trimmed): `cluster.namespace(ctx.namespace)`,
 * `cluster.nodes('pool=gpu')`, or `get` / `list` for any readable resource. */
export const cluster = {
  get(resource, name, namespace = '') {
    const got = read(() => witGet(resource, namespace, name));
    return got.object === undefined || got.object === null ? null : JSON.parse(got.object);
  },
  list(resource, selector = '', namespace = '', limit = 0) {
    return read(() => witList(resource, namespace, selector, limit)).items.map((item) => JSON.parse(item));
  },
  namespace(name) {
    return cluster.get('namespaces', name);
  },
  node(name) {
    return cluster.get('nodes', name);
  },
  nodes(selector = '') {
    return cluster.list('nodes', selector);
  },
};
