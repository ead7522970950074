// A deliberately misbehaving decorator in JavaScript, for the operator's tests of the sandbox
// with a language runtime inside: the same modes as the Rust one (`../hostile`) where
// JavaScript can express them, chosen by the settings document `{"mode": "<mode>"}`.
//
// | mode         | decorate-pod                                                   |
// |--------------|----------------------------------------------------------------|
// | `loop`       | never returns                                                  |
// | `memory`     | keeps allocating 16 MiB buffers                                |
// | `sleep`      | waits an hour on a timer (`setTimeout` in a promise)           |
// | `busy-wait`  | spins on `Date.now()` for an hour                              |
// | `network`    | `fetch` to 127.0.0.1:80; annotation `hostile/network`: `denied` or `connected` (built without `wasi:http`, the call traps first) |
// | `big-output` | the pod after 16 MiB of spaces                                 |
// | `throw`      | throws an error of its own                                     |
// | `ok`         | the pod unchanged                                              |
import * as tp from '../sdk-js/tfjob-policy/index.js';

const MODES = ['loop', 'memory', 'sleep', 'busy-wait', 'network', 'big-output', 'throw', 'ok'];

const hostile = {
  settings(reader) {
    const mode = reader.string('mode', 'ok');
    reader.done();
    if (!MODES.includes(mode)) throw new tp.InvalidSettings(`mode: ${JSON.stringify(mode)} is not one of ${MODES.join(', ')}`);
    return mode;
  },

  decorate(ctx, mode, pod) {
    switch (mode) {
      case 'loop':
        for (;;) { /* never returns */ }
      case 'memory': {
        // Large buffers: the interpreter fills 1 MiB ones slowly enough that a loaded machine
        // reached the deadline before the memory cap.
        const hoard = [];
        for (;;) hoard.push(new Uint8Array(1 << 24));
      }
      case 'busy-wait': {
        const end = Date.now() + 3600 * 1000;
        while (Date.now() < end) { /* spin */ }
        return pod;
      }
      case 'throw':
        throw new RangeError("the policy's own bug");
      default:
        return pod;
    }
  },
};

const hooks = tp.hooks(hostile);
export const settings = hooks.settings;
export const decorate = {
  decoratePod(ctx, settingsText, podText) {
    const mode = tp.parsed(settingsText, hostile.settings.bind(hostile));
    if (mode === 'big-output') return ' '.repeat(16 << 20) + podText;
    if (mode === 'network') {
      const annotate = (outcome) => {
        const pod = JSON.parse(podText);
        tp.pod.annotations(pod)['hostile/network'] = outcome;
        return JSON.stringify(pod);
      };
      const denied = (e) => {
        tp.log.warn('denied', { error: `${e?.name}: ${e?.message}`.slice(0, 200) });
        return annotate('denied');
      };
      try {
        return fetch('http://127.0.0.1:80/').then(() => annotate('connected'), denied);
      } catch (e) {
        return denied(e);
      }
    }
    if (mode === 'sleep') {
      // componentize-js runs the event loop to resolve a promise an export returns.
      return new Promise((resolve) => setTimeout(() => resolve(podText), 3600 * 1000));
    }
    return hooks.decorate.decoratePod(ctx, settingsText, podText);
  },
};
