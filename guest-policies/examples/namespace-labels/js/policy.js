// namespace-labels in JavaScript: copies the listed labels of the job's Namespace onto its pods.
//
// Settings: `{"labels": ["team", "cost-center"]}`; the manifest declares
// `reads: [{resource: namespaces}]`. A label the Namespace does not carry is left off, and so is
// every label of a Namespace that is gone. Build: componentize-js, world `decorator`.
import { cluster, hooks, InvalidSettings, log, pod } from '../../../sdk-js/tfjob-policy/index.js';

const namespaceLabels = {
  settings(reader) {
    const keys = reader.strings('labels', []);
    reader.done();
    keys.forEach((key, i) => {
      if (key === '') throw new InvalidSettings(`labels[${i}]: a label key may not be empty`);
    });
    return keys;
  },

  decorate(ctx, keys, p) {
    if (keys.length === 0) return p;
    const namespace = cluster.namespace(ctx.namespace);
    if (namespace === null) {
      log.warn("the job's namespace is gone", { namespace: ctx.namespace });
      return p;
    }
    const source = namespace.metadata?.labels ?? {};
    const labels = pod.labels(p);
    for (const key of keys) {
      if (Object.hasOwn(source, key)) labels[key] = source[key];
    }
    return p;
  },
};

export const { settings, decorate } = hooks(namespaceLabels);
