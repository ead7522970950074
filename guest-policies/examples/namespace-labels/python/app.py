"""namespace-labels in Python: copies the listed labels of the job's Namespace onto its pods.

Settings: `{"labels": ["team", "cost-center"]}`; the manifest declares
`reads: [{resource: namespaces}]`. A label the Namespace does not carry is left off, and so is
every label of a Namespace that is gone. Build: componentize-py, world `decorator`.
"""

import tfjob_policy as tp


class NamespaceLabels(tp.Policy):
    def settings(self, reader: tp.SettingsReader):
        keys = reader.strings("labels", [])
        reader.done()
        for i, key in enumerate(keys):
            if key == "":
                raise tp.InvalidSettings(f"labels[{i}]: a label key may not be empty")
        return keys

    def decorate(self, ctx: tp.Context, keys, pod):
        if not keys:
            return pod
        namespace = tp.cluster.namespace(ctx.namespace)
        if namespace is None:
            tp.log.warn("the job's namespace is gone", namespace=ctx.namespace)
            return pod
        source = namespace.get("metadata", {}).get("labels") or {}
        labels = tp.pod.labels(pod)
        for key in keys:
            if key in source:
                labels[key] = source[key]
        return pod


hooks = tp.exports(NamespaceLabels())
Settings, Decorate = hooks.Settings, hooks.Decorate
