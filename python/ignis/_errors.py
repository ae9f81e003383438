"""The exceptions ignis raises.

Every failure is an ``ignis.Error``; each subclass also derives from the Python exception a caller
would expect, so ``except ValueError`` keeps working for code written against FlashInfer or
PyTorch. Failures reported by the C library carry its ``ignis_last_error()`` text, which names the
function and the parameter ("ignis_rmsnorm: weight.shape[0]=4095 but it must be 4096").

    Error                        base of all of them
    InvalidArgumentError         ValueError          IGNIS_ERROR_INVALID_ARGUMENT
      DtypeError                 ValueError, TypeError   ... when the problem is a dtype
    UnsupportedError             NotImplementedError IGNIS_ERROR_UNSUPPORTED (valid, not compiled)
    InsufficientWorkspaceError   ValueError          IGNIS_ERROR_INSUFFICIENT_WORKSPACE
    CudaError                    RuntimeError        IGNIS_ERROR_CUDA
    InternalError                RuntimeError        IGNIS_ERROR_INTERNAL
    BackendUnavailableError      RuntimeError        IGNIS_ERROR_BACKEND_UNAVAILABLE
    PeerTimeoutError             TimeoutError        IGNIS_ERROR_TIMEOUT (a peer rank never arrived)
    ArgumentTypeError            TypeError           Python-level: not a DLPack object, bad stream...
"""


class Error(Exception):
    """Base class of every exception raised by ignis."""

    status = None


class InvalidArgumentError(Error, ValueError):
    """An argument is invalid (shape, stride, value, overlap, device mismatch)."""

    status = "IGNIS_ERROR_INVALID_ARGUMENT"


class DtypeError(InvalidArgumentError, TypeError):
    """An argument has a dtype the op does not take."""


class UnsupportedError(Error, NotImplementedError):
    """A valid request with no compiled variant (callers may fall back to another implementation)."""

    status = "IGNIS_ERROR_UNSUPPORTED"


class InsufficientWorkspaceError(Error, ValueError):
    """The workspace passed is smaller than the op needs."""

    status = "IGNIS_ERROR_INSUFFICIENT_WORKSPACE"


class CudaError(Error, RuntimeError):
    """The CUDA runtime reported an error."""

    status = "IGNIS_ERROR_CUDA"


class InternalError(Error, RuntimeError):
    """A bug in ignis."""

    status = "IGNIS_ERROR_INTERNAL"


class BackendUnavailableError(Error, RuntimeError):
    """The backend the tensors need is not built, or no device is present."""

    status = "IGNIS_ERROR_BACKEND_UNAVAILABLE"


class PeerTimeoutError(Error, TimeoutError):
    """A rank of a communicator waited longer than its timeout for its peers (ignis.comm)."""

    status = "IGNIS_ERROR_TIMEOUT"


class ArgumentTypeError(Error, TypeError):
    """An argument is not something ignis can take (no DLPack support, a bad stream object...)."""


# The classes of the C statuses: each is raised for the status its `status` names.
STATUS_CLASSES = (
    InvalidArgumentError,
    UnsupportedError,
    InsufficientWorkspaceError,
    CudaError,
    InternalError,
    BackendUnavailableError,
    PeerTimeoutError,
)
