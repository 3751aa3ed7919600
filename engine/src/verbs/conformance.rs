//! The provider conformance suite (in progress).
