//! `--provider soft|iwarp|rdma`: which verbs provider a tool runs on, and the one dispatch from
//! that choice to code generic over [`Provider`].
//!
//! Normal operation: a tool parses the flag with [`ProviderKind::parse`], wraps its run in a
//! [`ProviderJob`] and hands it to [`dispatch`], which calls [`ProviderJob::run`] with the
//! chosen provider as the type parameter and a [`Devices`] that opens that provider's devices.
//! The soft provider has one in-process fabric ([`Devices::fabric`], where pcap traces are
//! installed), so its server and client run in one process; the iWARP provider (RDMAP/DDP/MPA
//! over TCP, no kernel module) and the rdma provider (ibverbs / rdma_cm, feature `rdma`) can
//! run server and client as two processes. What a device cannot do (memory windows, Send With
//! Invalidate, shared receive queues) is read from its `DeviceCaps` by the code that needs it,
//! never from the provider's name.
//!
//! Recovery: an unknown provider name is a usage error naming the flag; `rdma` in a build
//! without the feature is an error returned by [`ProviderKind::available`] (and by
//! [`dispatch`]) before any device is opened; a device that does not open is the error string
//! of [`Devices::open`].

use std::net::{IpAddr, SocketAddr};

use rpcrdma_engine::verbs::iwarp::IwarpProvider;
use rpcrdma_engine::verbs::soft::{SoftFabric, SoftProvider};
use rpcrdma_engine::verbs::{Device, Provider};

/// Which verbs provider runs the tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderKind {
    /// The in-process software provider (default; server and client in one process).
    #[default]
    Soft,
    /// The user-space iWARP provider over TCP (server and client in two processes or hosts).
    Iwarp,
    /// ibverbs / rdma_cm (needs the `rdma` feature).
    Rdma,
}

impl ProviderKind {
    /// The names `--provider` accepts, for help texts and messages.
    pub const CHOICES: &'static str = "soft|iwarp|rdma";

    /// `--provider NAME` (`flag` names the flag in the message).
    pub fn parse(flag: &str, v: &str) -> Result<ProviderKind, String> {
        match v {
            "soft" => Ok(ProviderKind::Soft),
            "iwarp" => Ok(ProviderKind::Iwarp),
            "rdma" => Ok(ProviderKind::Rdma),
            _ => Err(format!("{flag} must be soft, iwarp or rdma, got {v:?}")),
        }
    }

    /// The provider's name as `--provider` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            ProviderKind::Soft => "soft",
            ProviderKind::Iwarp => "iwarp",
            ProviderKind::Rdma => "rdma",
        }
    }

    /// The transport perftest's banner names (`Transport type`): `IW` for the iWARP provider,
    /// `IB` for the soft provider (InfiniBand semantics). The rdma provider's banner is printed
    /// before its device is opened: `IB`, also for an iWARP device such as siw.
    pub const fn transport(self) -> &'static str {
        match self {
            ProviderKind::Iwarp => "IW",
            ProviderKind::Soft | ProviderKind::Rdma => "IB",
        }
    }

    /// Whether server and client always share this process (the soft fabric is in-process).
    pub const fn in_process(self) -> bool {
        matches!(self, ProviderKind::Soft)
    }

    /// Whether this build can run the provider (`rdma` needs the feature).
    pub fn available(self, prog: &str) -> Result<(), String> {
        if self == ProviderKind::Rdma && !cfg!(feature = "rdma") {
            return Err(format!(
                "this {prog} was built without the `rdma` feature; use --provider soft or iwarp"
            ));
        }
        Ok(())
    }
}

/// Opens the chosen provider's devices (see [`dispatch`]).
pub struct Devices<'a> {
    kind: ProviderKind,
    fabric: &'a SoftFabric,
    name: Option<&'a str>,
}

impl<'a> Devices<'a> {
    /// The provider chosen.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// The `-d` device name given, if any.
    pub fn device_name(&self) -> Option<&'a str> {
        self.name
    }

    /// The soft provider's fabric (its devices and its packet trace); `None` on the others.
    pub fn fabric(&self) -> Option<&'a SoftFabric> {
        (self.kind == ProviderKind::Soft).then_some(self.fabric)
    }

    /// Opens the device of `local` (unspecified: the iWARP provider's sockets bind to any
    /// address; the rdma provider picks the device that routes to `peer`, or the first local
    /// address with a device, named `-d` when given).
    pub fn open<P: AppProvider>(
        &self,
        local: IpAddr,
        peer: Option<SocketAddr>,
    ) -> Result<P::Device, String> {
        P::open_device(self, local, peer)
    }
}

/// A provider the tools can open devices of.
pub trait AppProvider: Provider {
    /// Opens a device as [`Devices::open`] describes.
    fn open_device(
        d: &Devices<'_>,
        local: IpAddr,
        peer: Option<SocketAddr>,
    ) -> Result<Self::Device, String>;

    /// The device's name for a tool's report: the kernel's name (`rxe0`, `siw0`) on the rdma
    /// provider, the provider's name and the local address on the others.
    fn device_label(dev: &Self::Device) -> String {
        format!("{} {}", Self::NAME, dev.local_ip())
    }
}

impl AppProvider for SoftProvider {
    fn open_device(
        d: &Devices<'_>,
        local: IpAddr,
        _: Option<SocketAddr>,
    ) -> Result<Self::Device, String> {
        Ok(d.fabric.open(local))
    }
}

impl AppProvider for IwarpProvider {
    fn open_device(
        _: &Devices<'_>,
        local: IpAddr,
        _: Option<SocketAddr>,
    ) -> Result<Self::Device, String> {
        IwarpProvider::open(local).map_err(|e| e.to_string())
    }
}

#[cfg(feature = "rdma")]
impl AppProvider for rpcrdma_engine::verbs::rdma::Rdma {
    fn open_device(
        d: &Devices<'_>,
        local: IpAddr,
        peer: Option<SocketAddr>,
    ) -> Result<Self::Device, String> {
        crate::perf::rdma_dev::open(local, peer, d.device_name()).map_err(|e| e.to_string())
    }

    fn device_label(dev: &Self::Device) -> String {
        dev.name().to_string()
    }
}

/// A run generic over the provider, started by [`dispatch`].
pub trait ProviderJob {
    /// What the run returns.
    type Output;
    /// Runs on provider `P`, opening devices through `devices`.
    fn run<P: AppProvider>(self, devices: &Devices<'_>) -> Self::Output;
}

/// Runs `job` on the provider `kind` (`device`: the `-d` name, used by the rdma provider to
/// pick among the host's devices). `Err` only when this build lacks the provider.
pub fn dispatch<J: ProviderJob>(
    kind: ProviderKind,
    device: Option<&str>,
    prog: &str,
    job: J,
) -> Result<J::Output, String> {
    kind.available(prog)?;
    let fabric = SoftFabric::new();
    let devices = Devices {
        kind,
        fabric: &fabric,
        name: device,
    };
    Ok(match kind {
        ProviderKind::Soft => job.run::<SoftProvider>(&devices),
        ProviderKind::Iwarp => job.run::<IwarpProvider>(&devices),
        #[cfg(feature = "rdma")]
        ProviderKind::Rdma => job.run::<rpcrdma_engine::verbs::rdma::Rdma>(&devices),
        #[cfg(not(feature = "rdma"))]
        ProviderKind::Rdma => unreachable!("available() refused it"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_three_provider_names() {
        for k in [ProviderKind::Soft, ProviderKind::Iwarp, ProviderKind::Rdma] {
            assert_eq!(ProviderKind::parse("--provider", k.name()), Ok(k));
        }
        assert!(ProviderKind::Soft.in_process() && !ProviderKind::Iwarp.in_process());
    }

    #[test]
    fn rejects_unknown_provider_names() {
        let e = ProviderKind::parse("--provider", "siw").unwrap_err();
        assert!(e.contains("--provider") && e.contains("iwarp"), "{e}");
    }

    struct Name;
    impl ProviderJob for Name {
        type Output = (&'static str, bool);
        fn run<P: AppProvider>(self, d: &Devices<'_>) -> Self::Output {
            (P::NAME, d.fabric().is_some())
        }
    }

    #[test]
    fn accepts_dispatch_to_the_chosen_provider() {
        assert_eq!(
            dispatch(ProviderKind::Iwarp, None, "t", Name),
            Ok(("iwarp", false))
        );
        assert_eq!(
            dispatch(ProviderKind::Soft, None, "t", Name),
            Ok((SoftProvider::NAME, true))
        );
    }
}
