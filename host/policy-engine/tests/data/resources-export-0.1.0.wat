;; The `tfjob:policy/resources@0.1.0` export of a hand-written test component, to be placed
;; in a component that defines the core memory `$mem`, the core function `$realloc` and the
;; core function `$override` (the lowered `override-resources`). The exported interface
;; instance is built as `wit-component` builds one: a small component that imports the
;; function and the types it names, and exports them again under their WIT names (exported
;; records and variants must be named). Included by `benches/policy_overhead.rs` and
;; `tests/preinit.rs`.
  (type $ctx (record
    (field "job-name" string)
    (field "namespace" string)
    (field "job-uid" string)
    (field "job-labels" (list (tuple string string)))
    (field "job-annotations" (list (tuple string string)))
    (field "replica-type" string)
    (field "replica-index" s32)
    (field "replica-count" s32)
    (field "attempt" s32)))
  (type $error (variant
    (case "invalid-input" string)
    (case "invalid-settings" string)
    (case "failed" string)))
  (func $override-resources
    (param "ctx" $ctx) (param "settings" string) (param "container-name" string)
    (param "resources" string)
    (result (result string (error $error)))
    (canon lift (core func $override) (memory $mem) (realloc $realloc)))

  (component $interface
    (type $ctx-def (record
      (field "job-name" string)
      (field "namespace" string)
      (field "job-uid" string)
      (field "job-labels" (list (tuple string string)))
      (field "job-annotations" (list (tuple string string)))
      (field "replica-type" string)
      (field "replica-index" s32)
      (field "replica-count" s32)
      (field "attempt" s32)))
    (import "import-type-job-context" (type $ctx (eq $ctx-def)))
    (type $error-def (variant
      (case "invalid-input" string)
      (case "invalid-settings" string)
      (case "failed" string)))
    (import "import-type-policy-error" (type $error (eq $error-def)))
    (import "import-func-override-resources" (func $f
      (param "ctx" $ctx) (param "settings" string) (param "container-name" string)
      (param "resources" string)
      (result (result string (error $error)))))
    (export $ctx-out "job-context" (type $ctx))
    (export $error-out "policy-error" (type $error))
    (export "override-resources" (func $f) (func
      (param "ctx" $ctx-out) (param "settings" string) (param "container-name" string)
      (param "resources" string)
      (result (result string (error $error-out))))))
  (instance $resources (instantiate $interface
    (with "import-type-job-context" (type $ctx))
    (with "import-type-policy-error" (type $error))
    (with "import-func-override-resources" (func $override-resources))))
  (export "tfjob:policy/resources@0.1.0" (instance $resources))
