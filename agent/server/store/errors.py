"""What a node store refuses or fails with, by kind: the HTTP layer maps each to its answer."""


class TooManyPending(Exception):
    """``max_pending`` registrations already wait for approval: nothing was stored."""


class TooManyUnvetted(TooManyPending):
    """``max_unvetted`` registrations exist that no admin approved: nothing was stored."""


class TooManyFromAddress(TooManyPending):
    """``max_per_address`` registrations from the same address already wait for approval: nothing
    was stored (a flood from one place cannot fill ``max_pending`` for everyone)."""


class StoreUnavailable(Exception):
    """The shared store cannot be reached: nothing was written. The HTTP layer answers 503 with
    Retry-After (nodes retry); reads keep answering from what the replica already has."""


class StoreSetupError(Exception):
    """The store cannot start as configured (a missing namespace): ``serve`` stops with the message."""


class ReportTooLarge(Exception):
    """A report the store's engine cannot hold (the message names the limit): nothing written, 413."""
