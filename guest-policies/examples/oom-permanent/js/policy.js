// oom-permanent in JavaScript: a failed pod whose container ended for a reason listed in the
// settings (e.g. `OOMKilled`) fails permanently; running it again would not help. Other pods
// are read from their phase.
//
// Settings: `{"permanentReasons": ["OOMKilled"]}`.
// Build: `npm run build` (componentize-js, world `classifier`).
import { hooks, fromPodPhase, InvalidSettings, pod, verdict } from '../../../sdk-js/tfjob-policy/index.js';

const oomPermanent = {
  settings(reader) {
    const reasons = reader.strings('permanentReasons', []);
    reader.done();
    reasons.forEach((reason, i) => {
      if (reason === '') throw new InvalidSettings(`permanentReasons[${i}]: must not be empty`);
    });
    return new Set(reasons);
  },

  classify(ctx, reasons, p, now) {
    const phase = pod.phase(p);
    const reason = phase === 'Failed' ? pod.terminatedReason(p) : null;
    if (reason !== null && reasons.has(reason)) {
      return verdict({
        phase: 'permanent-failure',
        reason,
        message: `a container ended with ${reason}; running it again would not help`,
        kind: 'user',
      });
    }
    return fromPodPhase(phase, reason ?? '');
  },
};

export const { settings, classify } = hooks(oomPermanent);
