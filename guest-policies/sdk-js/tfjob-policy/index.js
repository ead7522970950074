// The TFJob operator's policy SDK for JavaScript (componentize-js): `core.js` and the
// contract's `log` import. Import this file from a policy; import `core.js` in Node tests.
import { log as witLog } from 'tfjob:policy/log@0.3.0';

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
