// The TFJob operator's policy SDK for JavaScript: everything but the contract's imports, so
// that it also runs under Node for a policy's own unit tests.
//
// A hook receives the Kubernetes API's JSON and returns it; the SDK decodes it to plain objects
// and encodes the result again, so a policy edits the pod in place and everything it does not
// touch comes back as it came. Settings are read field by field through `SettingsReader`, whose
// `done()` refuses every key the policy did not read, and are parsed once per text: the
// operator checks a version's settings once and starts later calls from the memory that check
// left (pre-initialised copies), so a hook of that version does not parse them again.

/** A hook's refusal; `category` is the contract's `policy-error` case. */
export class PolicyError extends Error {
  constructor(message, category = 'failed') {
    super(message);
    this.name = 'PolicyError';
    this.category = category;
  }
}

/** The pod, resources or context is not what the policy expects; name the field. */
export class InvalidInput extends PolicyError {
  constructor(message) {
    super(message, 'invalid-input');
    this.name = 'InvalidInput';
  }
}

/** The settings document is invalid; name the field. */
export class InvalidSettings extends PolicyError {
  constructor(message) {
    super(message, 'invalid-settings');
    this.name = 'InvalidSettings';
  }
}

function kind(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  switch (typeof value) {
    case 'boolean': return 'a boolean';
    case 'number': return 'a number';
    case 'string': return 'a string';
    default: return 'an object';
  }
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

const LABEL_VALUE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$/;

/** Whether `value` may be a Kubernetes label value (empty included). */
export function isLabelValue(value) {
  return typeof value === 'string' && LABEL_VALUE.test(value);
}

const LABEL_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/;

/** Whether `value` may be a Kubernetes label key: a name, optionally after a DNS subdomain
 * prefix and `/` (`team`, `example.com/tier`). */
export function isLabelKey(value) {
  if (typeof value !== 'string') return false;
  const slash = value.indexOf('/');
  const [prefix, name] = slash < 0 ? [null, value] : [value.slice(0, slash), value.slice(slash + 1)];
  if (prefix !== null && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) return false;
  return LABEL_NAME.test(name);
}

const QUANTITY = /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+|[numkMGTPE]i?)?$/;

/** Whether `value` is spelled as a Kubernetes quantity (`512Mi`, `100m`, `1e3`). */
export function isQuantity(value) {
  return typeof value === 'string' && QUANTITY.test(value) && !/[num]i$/.test(value);
}

/** One settings document; read it with the typed getters, then call `done()`. */
export class SettingsReader {
  constructor(document, path = '') {
    this.document = document;
    this.path = path;
    this.read = new Set();
  }

  /** Decodes `text`; empty text and `null` are `{}`; anything but an object is refused. */
  static parse(text) {
    if (text.trim() === '') return new SettingsReader({});
    let document;
    try {
      document = JSON.parse(text);
    } catch (e) {
      throw new InvalidSettings(`settings: not JSON: ${e.message}`);
    }
    if (document === null) return new SettingsReader({});
    if (!isObject(document)) {
      throw new InvalidSettings(`settings: expected an object, got ${kind(document)}`);
    }
    return new SettingsReader(document);
  }

  field(key) {
    return this.path ? `${this.path}.${key}` : key;
  }

  typed(key, fallback, check, want) {
    this.read.add(key);
    const value = Object.hasOwn(this.document, key) ? this.document[key] : null;
    if (value === null) {
      if (fallback === undefined) throw new InvalidSettings(`${this.field(key)}: required`);
      return fallback;
    }
    if (!check(value)) {
      throw new InvalidSettings(`${this.field(key)}: expected ${want}, got ${kind(value)}`);
    }
    return value;
  }

  /** A string field; without `fallback` it is required. */
  string(key, fallback) {
    return this.typed(key, fallback, (v) => typeof v === 'string', 'a string');
  }

  boolean(key, fallback) {
    return this.typed(key, fallback, (v) => typeof v === 'boolean', 'a boolean');
  }

  integer(key, fallback) {
    return this.typed(key, fallback, Number.isSafeInteger, 'an integer');
  }

  /** A list of strings; an element of another type is named by its index. */
  strings(key, fallback) {
    const value = this.typed(key, fallback, Array.isArray, 'a list');
    if (value === fallback) return value;
    value.forEach((item, i) => {
      if (typeof item !== 'string') {
        throw new InvalidSettings(`${this.field(key)}[${i}]: expected a string, got ${kind(item)}`);
      }
    });
    return [...value];
  }

  /** An object whose values are strings, e.g. labels. */
  stringMap(key, fallback) {
    const value = this.typed(key, fallback, isObject, 'an object');
    if (value === fallback) return value;
    for (const [name, item] of Object.entries(value)) {
      if (typeof item !== 'string') {
        throw new InvalidSettings(
          `${this.field(key)}[${JSON.stringify(name)}]: expected a string, got ${kind(item)}`,
        );
      }
    }
    return { ...value };
  }

  /** A nested object, read the same way (absent: an empty one); call its `done()` too. */
  object(key) {
    return new SettingsReader(this.typed(key, {}, isObject, 'an object'), this.field(key));
  }

  /** Refuses the keys no getter read. */
  done() {
    const unknown = Object.keys(this.document).filter((k) => !this.read.has(k)).sort();
    if (unknown.length > 0) {
      const known = [...this.read].sort().join(', ') || 'none';
      throw new InvalidSettings(`${this.field(unknown[0])}: unknown field (known fields: ${known})`);
    }
  }
}

let last = null;

/** `parse(SettingsReader.parse(text))`, kept by text: the same text is parsed once. */
export function parsed(text, parse) {
  if (last === null || last.text !== text || last.parse !== parse) {
    last = { text, parse, value: parse(SettingsReader.parse(text)) };
  }
  return last.value;
}

/** `text` as a JSON object; empty text is `{}`; anything else is `invalid-input`. */
export function decode(text, what) {
  if (text.trim() === '') return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new InvalidInput(`${what}: not JSON: ${e.message}`);
  }
  if (!isObject(value)) throw new InvalidInput(`${what}: expected an object`);
  return value;
}

function child(parent, key, path) {
  if (parent[key] === undefined || parent[key] === null) parent[key] = {};
  if (!isObject(parent[key])) throw new InvalidInput(`${path}: expected an object`);
  return parent[key];
}

/** Accessors for a pod document. */
export const pod = {
  /** `metadata.labels`, created when absent: set a key to label the pod. */
  labels(p) {
    return child(child(p, 'metadata', 'pod.metadata'), 'labels', 'pod.metadata.labels');
  },
  /** `metadata.annotations`, created when absent. */
  annotations(p) {
    return child(child(p, 'metadata', 'pod.metadata'), 'annotations', 'pod.metadata.annotations');
  },
  /** `spec.containers` (empty when absent). */
  containers(p) {
    const value = p.spec?.containers ?? [];
    if (!Array.isArray(value)) throw new InvalidInput('pod.spec.containers: expected a list');
    return value;
  },
  /** `status.phase`, `Unknown` when absent. */
  phase(p) {
    return String(p.status?.phase ?? 'Unknown');
  },
  /** The reason of the first container that terminated with a non-zero exit code, e.g.
   * `OOMKilled` or `Error`; `null` when none did. */
  terminatedReason(p) {
    for (const status of p.status?.containerStatuses ?? []) {
      const terminated = status?.state?.terminated;
      if (terminated && (terminated.exitCode ?? 0) !== 0) return String(terminated.reason || 'Error');
    }
    return null;
  },
};

/** The contract's phases and failure kinds, spelled as in the WIT. */
export const PHASES = [
  'undefined', 'queued', 'waiting-for-resources', 'initializing', 'running', 'succeeded',
  'retryable-failure', 'permanent-failure',
];
export const KINDS = ['user', 'system'];

/** A verdict, checked: `{phase, reason, message, kind, occurredAt, recheckAt}`. */
export function verdict({ phase, reason = '', message = '', kind = undefined, occurredAt = undefined, recheckAt = undefined }) {
  if (!PHASES.includes(phase)) {
    throw new TypeError(`verdict phase ${JSON.stringify(phase)}: expected one of ${PHASES.join(', ')}`);
  }
  if (kind !== undefined && kind !== null && !KINDS.includes(kind)) {
    throw new TypeError(`verdict kind ${JSON.stringify(kind)}: expected user or system`);
  }
  return { phase, reason, message, kind: kind ?? undefined, occurredAt: occurredAt ?? undefined, recheckAt: recheckAt ?? undefined };
}

/** The plain reading of a pod's `status.phase`: `Failed` is a retryable user failure. */
export function fromPodPhase(podPhase, reason = '', message = '') {
  const phase = { Pending: 'queued', Running: 'running', Succeeded: 'succeeded', Failed: 'retryable-failure' }[podPhase] ?? 'undefined';
  return verdict({ phase, reason: reason || podPhase, message, kind: phase === 'retryable-failure' ? 'user' : undefined });
}

/** The contract's `job-context` with labels and annotations as objects. */
export function context(ctx) {
  return {
    ...ctx,
    jobLabels: Object.fromEntries(ctx.jobLabels ?? []),
    jobAnnotations: Object.fromEntries(ctx.jobAnnotations ?? []),
  };
}

/** RFC 3339 text (as the operator sends `now`) as a Date. */
export function parseTime(text, what) {
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) throw new InvalidInput(`${what}: ${JSON.stringify(text)} is not an RFC 3339 time`);
  return date;
}

/** The contract's error for anything a hook threw: the SDK's errors keep their category, any
 * other exception is `failed` with its text, so a bug is an error the operator reports. */
export function policyError(e) {
  if (e instanceof PolicyError) return { tag: e.category, val: e.message };
  return { tag: 'failed', val: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}` };
}

/** The objects componentize-js exports for `policy`, one per interface of the contract:
 * export the ones your world names, e.g. `export const { settings, decorate } = hooks(policy)`.
 * `policy` has `settings(reader)` and the hooks it implements: `decorate(ctx, settings, pod)`,
 * `resources(ctx, settings, container, resources)`, `classify(ctx, settings, pod, now)`. */
export function hooks(policy) {
  // Bound once, so that `parsed` recognises the same parser on every call.
  const parseSettings = policy.settings ? policy.settings.bind(policy) : (r) => r.done();
  const settingsOf = (text) => parsed(text, parseSettings);
  const guarded = (call) => {
    try {
      return call();
    } catch (e) {
      throw policyError(e);
    }
  };
  return {
    settings: {
      validateSettings(text) {
        try {
          settingsOf(text);
        } catch (e) {
          throw e instanceof PolicyError ? e.message : `settings: ${policyError(e).val}`;
        }
      },
    },
    decorate: {
      decoratePod(ctx, settings, podText) {
        return guarded(() => JSON.stringify(policy.decorate(context(ctx), settingsOf(settings), decode(podText, 'pod'))));
      },
    },
    resources: {
      overrideResources(ctx, settings, container, resources) {
        return guarded(() => JSON.stringify(policy.resources(context(ctx), settingsOf(settings), container, decode(resources, 'resources'))));
      },
    },
    classify: {
      classifyPod(ctx, settings, podText, now) {
        return guarded(() => verdict(policy.classify(context(ctx), settingsOf(settings), decode(podText, 'pod'), parseTime(now, 'now'))));
      },
    },
  };
}
