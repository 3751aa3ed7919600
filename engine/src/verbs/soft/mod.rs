//! The in-process software provider (in progress).
