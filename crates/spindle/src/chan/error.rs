//! Why a send or a receive on a channel failed; a message that could not
//! be sent is given back in the error.

use std::fmt;

/// Every receiver is gone; the message is given back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// Every sender is gone and the channel is empty.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub struct RecvError;

/// Why a `try_send` failed; the message is given back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// No room (or, for `bounded(0)`, no receiver waiting).
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// Why a `try_recv` failed.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum TryRecvError {
    /// Nothing to receive now.
    Empty,
    /// Every sender is gone and the channel is empty.
    Disconnected,
}

/// Why a `send_timeout` failed; the message is given back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// The time ran out.
    Timeout(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// Why a `recv_timeout` failed.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum RecvTimeoutError {
    /// The time ran out.
    Timeout,
    /// Every sender is gone and the channel is empty.
    Disconnected,
}

macro_rules! opaque_debug {
    ($($t:ident),*) => {$(
        impl<T> fmt::Debug for $t<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($t), "(..)"))
            }
        }
    )*};
}
opaque_debug!(SendError);

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a disconnected channel")
    }
}
impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receiving on an empty and disconnected channel")
    }
}
impl<T> std::error::Error for SendError<T> {}
impl std::error::Error for RecvError {}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "sending on a full channel",
            TrySendError::Disconnected(_) => "sending on a channel whose receivers are all gone",
        })
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "receiving on an empty channel",
            TryRecvError::Disconnected => "receiving on an empty and closed channel",
        })
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendTimeoutError::Timeout(_) => "timed out sending on a full channel",
            SendTimeoutError::Disconnected(_) => {
                "sending on a channel whose receivers are all gone"
            }
        })
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvTimeoutError::Timeout => "timed out receiving on an empty channel",
            RecvTimeoutError::Disconnected => "receiving on an empty and closed channel",
        })
    }
}

impl<T> std::error::Error for TrySendError<T> {}
impl std::error::Error for TryRecvError {}
impl<T> std::error::Error for SendTimeoutError<T> {}
impl std::error::Error for RecvTimeoutError {}
