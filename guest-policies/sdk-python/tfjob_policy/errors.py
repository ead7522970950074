"""Why a policy could not decide: the contract's three error categories as exceptions.

Raise them from a hook; the SDK's adapter turns them into the contract's `policy-error`
variant. Any other exception a hook lets escape is reported as `failed`, with its type and text,
instead of trapping the component.
"""


class PolicyError(Exception):
    """A hook's refusal; `category` is the contract's variant case."""

    category = "failed"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(PolicyError):
    """The pod, resources or context is not what the policy expects; name the field."""

    category = "invalid-input"


class InvalidSettings(PolicyError):
    """The settings document is invalid; name the field."""

    category = "invalid-settings"


class Failed(PolicyError):
    """Any other failure."""

    category = "failed"
