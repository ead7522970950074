// The {{name}} policy for the TFJob operator, in JavaScript: a WebAssembly component built
// with componentize-js, implementing the `tfjob:policy@0.3.0` contract for the hooks {{hooks}}.
//
{{#decorate}}
// - decorate: puts the labels named in the settings (`labels`) on every pod.
{{#reads}}
//   It also copies the labels of the job's Namespace that the settings list
//   (`namespaceLabels`), read from the operator's cache: the manifest declares
//   `reads: [{resource: namespaces}]` (`policy pack --read namespaces`).
{{/reads}}
{{/decorate}}
{{#resources}}
// - resources: gives containers that ask for no memory the request named in the settings
//   (`defaultMemoryRequest`).
{{/resources}}
{{#classify}}
// - classify: reads pods from their phase, except that failures with a reason named in the
//   settings (`permanentReasons`) are permanent: running the pod again would not help.
{{/classify}}
//
// The operator checks the settings once with `validate-settings` before it activates the
// policy, and hands the same document to every call. Each call runs in a fresh sandbox: keep
// no state between calls.
import * as tp from './tfjob-policy/index.js';

const policy = {
  /** The settings document, e.g. `{{settings_example}}`; `{}` changes nothing. */
  settings(reader) {
    const settings = {
{{#decorate}}
      labels: reader.stringMap('labels', {}),
{{/decorate}}
{{#reads}}
      namespaceLabels: reader.strings('namespaceLabels', []),
{{/reads}}
{{#resources}}
      defaultMemoryRequest: reader.string('defaultMemoryRequest', null),
{{/resources}}
{{#classify}}
      permanentReasons: reader.strings('permanentReasons', []),
{{/classify}}
    };
    // Unknown keys are errors, so that a misspelt setting is refused instead of ignored.
    reader.done();
{{#decorate}}
    for (const [key, value] of Object.entries(settings.labels)) {
      const field = `labels[${JSON.stringify(key)}]`;
      if (!tp.isLabelKey(key)) throw new tp.InvalidSettings(`${field}: ${JSON.stringify(key)} is not a label key`);
      if (!tp.isLabelValue(value)) throw new tp.InvalidSettings(`${field}: ${JSON.stringify(value)} is not a label value`);
    }
{{/decorate}}
{{#reads}}
    settings.namespaceLabels.forEach((key, i) => {
      if (key === '') throw new tp.InvalidSettings(`namespaceLabels[${i}]: a label key may not be empty`);
    });
{{/reads}}
{{#resources}}
    const request = settings.defaultMemoryRequest;
    if (request !== null && !tp.isQuantity(request)) {
      throw new tp.InvalidSettings(`defaultMemoryRequest: ${JSON.stringify(request)} is not a quantity`);
    }
{{/resources}}
{{#classify}}
    settings.permanentReasons.forEach((reason, i) => {
      if (reason === '') throw new tp.InvalidSettings(`permanentReasons[${i}]: must not be empty`);
    });
{{/classify}}
    return settings;
  },
{{#decorate}}

  decorate(ctx, settings, pod) {
    for (const [key, value] of Object.entries(settings.labels)) {
      tp.log.debug('labelling pod', { job: ctx.jobName, label: key });
      tp.pod.labels(pod)[key] = value;
    }
{{#reads}}
    if (settings.namespaceLabels.length > 0) {
      // A failed read throws tp.ReadError and fails the call with its category (the manifest's
      // failurePolicy decides); a Namespace that is gone leaves the pod as it is.
      const namespace = tp.cluster.namespace(ctx.namespace);
      const source = namespace?.metadata?.labels ?? {};
      const labels = tp.pod.labels(pod);
      for (const key of settings.namespaceLabels) {
        if (Object.hasOwn(source, key)) labels[key] = source[key];
      }
    }
{{/reads}}
    return pod;
  },
{{/decorate}}
{{#resources}}

  resources(ctx, settings, container, resources) {
    const request = settings.defaultMemoryRequest;
    const setsMemory = ['requests', 'limits'].some((k) => resources[k]?.memory !== undefined);
    if (request && !setsMemory) {
      tp.log.info('default memory request', { container });
      resources.requests = { ...(resources.requests ?? {}), memory: request };
    }
    return resources;
  },
{{/resources}}
{{#classify}}

  classify(ctx, settings, pod, now) {
    const phase = tp.pod.phase(pod);
    const reason = phase === 'Failed' ? tp.pod.terminatedReason(pod) : null;
    if (reason !== null && settings.permanentReasons.includes(reason)) {
      return tp.verdict({
        phase: 'permanent-failure',
        reason,
        message: `${reason} is permanent here; running the pod again would not help`,
        kind: 'user',
      });
    }
    return tp.fromPodPhase(phase, reason ?? '');
  },
{{/classify}}
};

// componentize-js exports one object per interface of the world in wit/world.wit.
const hooks = tp.hooks(policy);
export const settings = hooks.settings;
{{#decorate}}
export const decorate = hooks.decorate;
{{/decorate}}
{{#resources}}
export const resources = hooks.resources;
{{/resources}}
{{#classify}}
export const classify = hooks.classify;
{{/classify}}
