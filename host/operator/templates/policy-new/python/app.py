"""The {{name}} policy for the TFJob operator, in Python: a WebAssembly component built with
componentize-py, implementing the `tfjob:policy@0.3.0` contract for the hooks {{hooks}}.

{{#decorate}}
- decorate: puts the labels named in the settings (`labels`) on every pod.
{{#reads}}
  It also copies the labels of the job's Namespace that the settings list (`namespaceLabels`),
  read from the operator's cache: the manifest declares `reads: [{resource: namespaces}]`
  (`policy pack --read namespaces`).
{{/reads}}
{{/decorate}}
{{#resources}}
- resources: gives containers that ask for no memory the request named in the settings
  (`defaultMemoryRequest`).
{{/resources}}
{{#classify}}
- classify: reads pods from their phase, except that failures with a reason named in the
  settings (`permanentReasons`) are permanent: running the pod again would not help.
{{/classify}}

The operator checks the settings once with `validate-settings` before it activates the policy,
and hands the same document to every call. Each call runs in a fresh sandbox: keep no state
between calls.
"""

import json

import tfjob_policy as tp


class {{type}}(tp.Policy):
    def settings(self, reader: tp.SettingsReader) -> dict:
        """The settings document, e.g. `{{settings_example}}`; `{}` changes nothing."""
        settings = {
{{#decorate}}
            "labels": reader.string_map("labels", {}),
{{/decorate}}
{{#reads}}
            "namespace_labels": reader.strings("namespaceLabels", []),
{{/reads}}
{{#resources}}
            "default_memory_request": reader.string("defaultMemoryRequest", None),
{{/resources}}
{{#classify}}
            "permanent_reasons": reader.strings("permanentReasons", []),
{{/classify}}
        }
        # Unknown keys are errors, so that a misspelt setting is refused instead of ignored.
        reader.done()
{{#decorate}}
        for key, value in settings["labels"].items():
            if not tp.is_label_key(key):
                raise tp.InvalidSettings(f"labels[{json.dumps(key)}]: {key!r} is not a label key")
            if not tp.is_label_value(value):
                raise tp.InvalidSettings(f"labels[{json.dumps(key)}]: {value!r} is not a label value")
{{/decorate}}
{{#reads}}
        for i, key in enumerate(settings["namespace_labels"]):
            if key == "":
                raise tp.InvalidSettings(f"namespaceLabels[{i}]: a label key may not be empty")
{{/reads}}
{{#resources}}
        request = settings["default_memory_request"]
        if request is not None and not tp.is_quantity(request):
            raise tp.InvalidSettings(f"defaultMemoryRequest: {request!r} is not a quantity")
{{/resources}}
{{#classify}}
        for i, reason in enumerate(settings["permanent_reasons"]):
            if reason == "":
                raise tp.InvalidSettings(f"permanentReasons[{i}]: must not be empty")
{{/classify}}
        return settings
{{#decorate}}

    def decorate(self, ctx: tp.Context, settings: dict, pod: dict) -> dict:
        for key, value in settings["labels"].items():
            tp.log.debug("labelling pod", job=ctx.job_name, label=key)
            tp.pod.labels(pod)[key] = value
{{#reads}}
        if settings["namespace_labels"]:
            # A failed read raises tp.cluster.ReadError and fails the call with its category (the
            # manifest's failurePolicy decides); a Namespace that is gone leaves the pod as it is.
            namespace = tp.cluster.namespace(ctx.namespace)
            source = ((namespace or {}).get("metadata") or {}).get("labels") or {}
            labels = tp.pod.labels(pod)
            for key in settings["namespace_labels"]:
                if key in source:
                    labels[key] = source[key]
{{/reads}}
        return pod
{{/decorate}}
{{#resources}}

    def resources(self, ctx: tp.Context, settings: dict, container: str, resources: dict) -> dict:
        request = settings["default_memory_request"]
        sets_memory = any("memory" in (resources.get(k) or {}) for k in ("requests", "limits"))
        if request and not sets_memory:
            tp.log.info("default memory request", container=container)
            resources.setdefault("requests", {})["memory"] = request
        return resources
{{/resources}}
{{#classify}}

    def classify(self, ctx: tp.Context, settings: dict, pod: dict, now) -> tp.Verdict:
        phase = tp.pod.phase(pod)
        reason = tp.pod.terminated_reason(pod) if phase == "Failed" else None
        if reason is not None and reason in settings["permanent_reasons"]:
            return tp.Verdict(
                phase="permanent-failure",
                reason=reason,
                message=f"{reason} is permanent here; running the pod again would not help",
                kind="user",
            )
        return tp.from_pod_phase(phase, reason=reason or "")
{{/classify}}


# componentize-py exports one class per interface of the world in wit/world.wit.
hooks = tp.exports({{type}}())
Settings = hooks.Settings
{{#decorate}}
Decorate = hooks.Decorate
{{/decorate}}
{{#resources}}
Resources = hooks.Resources
{{/resources}}
{{#classify}}
Classify = hooks.Classify
{{/classify}}
