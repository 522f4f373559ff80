"""Drop-ins for other ACP libraries, so their users switch to acp_fast without rewriting code.

* [`acp_fast.compat.acp_sdk`][acp_fast.compat.acp_sdk] -- the official Python SDK (`agent-client-protocol`,
  import name `acp`): transports for its message-level `Transport` seam.

Nothing here is imported by `import acp_fast`; importing a drop-in does not import the
library it stands in for either (that happens when a helper that needs it is called).
"""
