//! Configuration: one YAML file says what Foresight listens on and which
//! workloads it sizes.
//!
//! Two stages, as ripgrep does with its flags: [`raw`] mirrors the file
//! exactly (serde, unknown keys rejected), and [`Settings`] is the validated,
//! resolved form the rest of the program uses: defaults applied, profiles
//! looked up, paths made absolute. Loading never binds a port or starts work.

pub(crate) mod raw;
mod roles;
mod sections;
pub(crate) mod yaml;

use std::{
    collections::{BTreeMap, HashSet},
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

pub(crate) use yaml::YamlError;

pub(crate) use sections::default_kube_settings;
use sections::{check_k8s_name, validate_kubernetes, validate_pools, validate_reservations, validate_sizing};

use crate::{
    capacity::{CapacityType, Pool, Reservation},
    cluster::KubeSettings,
    sizing::{
        profile::{Profile, BUILTIN_PROFILES},
        Policy,
    },
    sources::Signal,
    workload::{workload_key, Target, Workload},
};

/// The demo configuration, compiled in: `foresight serve --demo`.
pub const DEMO_CONFIG: &str = include_str!("../../deploy/local/foresight.yaml");
const DEMO_ORIGIN: &str = "deploy/local/foresight.yaml (built in)";

/// Everything that can be wrong with a config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {error}")]
    Read { path: String, error: std::io::Error },
    /// Bad YAML, a wrong type, an unknown or missing key (in the config or a profile).
    #[error("{0}")]
    Syntax(#[from] YamlError),
    /// Well-formed, but values that do not make sense; every problem found.
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
}

/// One invalid value.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub(crate) origin: String,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.origin, self.field, self.message)
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it came from (a path, or the built-in demo).
    pub(crate) origin: String,
    pub grpc: GrpcSettings,
    pub http: HttpSettings,
    pub(crate) tick_interval: Duration,
    pub(crate) log_every_decision: bool,
    pub store: StoreSettings,
    pub(crate) forecast: ForecastSettings,
    pub(crate) sizing: SizingSettings,
    pub pools: Vec<Pool>,
    pub(crate) reservations: Vec<Reservation>,
    pub workloads: Vec<Arc<Workload>>,
    /// Kubernetes inputs; `None`: off (the default).
    pub kubernetes: Option<KubeSettings>,
}

/// How forecasts become replica counts (the predictive sizing's settings).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SizingSettings {
    pub(crate) policy: Policy,
    /// One of the forecast's quantiles.
    pub(crate) quantile: f64,
    pub(crate) scale_down_stabilization: Duration,
    pub(crate) plan_step_secs: i64,
    /// How long a stale target signal may be bridged by the last good forecast.
    pub(crate) forecast_only: Duration,
    /// Size on the per-replica capacity learned from the pods (profile as prior).
    pub(crate) learn_capacity: bool,
    /// Lease lengths of the spare-capacity forecast, shortest first; empty: off.
    pub(crate) spare_horizons_secs: Vec<u64>,
}

/// How forecasts are refitted in the background (the refit worker's settings).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ForecastSettings {
    pub(crate) enabled: bool,
    pub(crate) refit_interval: Duration,
    pub(crate) reselect_interval: Duration,
    /// History each fit reads.
    pub(crate) history: Duration,
    pub(crate) origins: usize,
    /// Sorted, in (0, 1).
    pub(crate) quantiles: Vec<f64>,
    /// Seasonal periods in store buckets, shortest first.
    pub(crate) seasons: Vec<usize>,
    /// Threads that fit forecasts; 0 for one per core.
    pub(crate) refit_threads: usize,
    /// At start, the longest a workload waits for its first forecast.
    pub(crate) first_fit_wait: Duration,
}

/// Where and how history is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSettings {
    /// `None`: in memory only.
    pub path: Option<PathBuf>,
    pub(crate) resolution: Duration,
    pub(crate) retention: Duration,
    pub(crate) flush_interval: Duration,
    pub(crate) cache_bytes: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GrpcSettings {
    pub listen: SocketAddr,
    pub(crate) tls: Option<TlsFiles>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
    /// When set, client certificates signed by this CA are required (mTLS).
    pub(crate) client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    pub listen: SocketAddr,
    pub tls: Option<TlsFiles>,
    /// Required on `/api/*` and `/ui` when set.
    pub bearer_token: Option<Secret>,
    /// The token is required on `/metrics` too.
    pub token_on_metrics: bool,
    pub max_in_flight: usize,
}

/// A credential: compared, never printed (`Debug` shows its length only).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// Equal to `other`, in time that does not depend on where they differ.
    pub(crate) fn matches(&self, other: &[u8]) -> bool {
        let a = self.0.as_bytes();
        a.len() == other.len() && a.iter().zip(other).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Settings {
    /// Load and validate a config file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: origin.clone(), error })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Settings::from_yaml(&text, &origin, base)
    }

    /// The built-in demo: simulated vLLM fleets, loopback addresses.
    pub(crate) fn demo() -> Result<Settings, ConfigError> {
        Settings::from_yaml(DEMO_CONFIG, DEMO_ORIGIN, Path::new("."))
    }

    /// Validate config text; relative paths in it resolve against `base`.
    pub fn from_yaml(text: &str, origin: &str, base: &Path) -> Result<Settings, ConfigError> {
        let raw: raw::RawConfig = yaml::parse(text, origin)?;
        let profiles = load_profiles(raw.models_dir.as_ref().map(|d| base.join(d)).as_deref())?;
        validate(raw, origin, base, &profiles)
    }
}

/// Built-in profiles, then those in `dir` (which override by name).
/// One capacity profile: a YAML file at `arg`, or a built-in profile by name.
pub(crate) fn load_profile(arg: &str) -> Result<Profile, ConfigError> {
    let path = Path::new(arg);
    let (origin, text) = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::Read { path: path.display().to_string(), error })?;
        (path.display().to_string(), text)
    } else {
        let builtin = load_profiles(None)?;
        return builtin.get(arg).cloned().ok_or_else(|| {
            ConfigError::Invalid(vec![Problem {
                origin: "--model-profile".into(),
                field: arg.to_string(),
                message: format!(
                    "is neither a file nor a built-in profile (built in: {})",
                    builtin.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            }])
        });
    };
    let profile: Profile = yaml::parse(&text, &origin)?;
    let problems: Vec<Problem> = profile
        .problems()
        .into_iter()
        .map(|(field, message)| Problem { origin: origin.clone(), field: field.to_string(), message })
        .collect();
    if problems.is_empty() {
        Ok(profile)
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

fn load_profiles(dir: Option<&Path>) -> Result<BTreeMap<String, Profile>, ConfigError> {
    let mut texts: Vec<(String, String)> =
        BUILTIN_PROFILES.iter().map(|(file, text)| (format!("models/{file} (built in)"), text.to_string())).collect();
    if let Some(dir) = dir {
        let read_err = |error| ConfigError::Read { path: format!("models_dir {}", dir.display()), error };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for path in files {
            let origin = path.display().to_string();
            let text =
                std::fs::read_to_string(&path).map_err(|error| ConfigError::Read { path: origin.clone(), error })?;
            texts.push((origin, text));
        }
    }
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for (origin, text) in texts {
        let profile: Profile = yaml::parse(&text, &origin)?;
        problems.extend(profile.problems().into_iter().map(|(field, message)| Problem {
            origin: origin.clone(),
            field: field.to_string(),
            message,
        }));
        out.insert(profile.name.clone(), profile);
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

fn validate(
    raw: raw::RawConfig,
    origin: &str,
    base: &Path,
    profiles: &BTreeMap<String, Profile>,
) -> Result<Settings, ConfigError> {
    let mut problems = Vec::new();
    let mut bad = |field: String, message: String| {
        problems.push(Problem { origin: origin.to_string(), field, message });
    };

    if !(0.1..=3600.0).contains(&raw.tick_interval_secs) {
        bad("tick_interval_secs".into(), format!("must be within 0.1..=3600, got {}", raw.tick_interval_secs));
    }
    if raw.grpc.listen == raw.http.listen && raw.grpc.listen.port() != 0 {
        bad("http.listen".into(), format!("is the same address as grpc.listen ({})", raw.grpc.listen));
    }
    let mut tls_files = |section: &str, raw: Option<raw::RawTls>| {
        let tls = raw.map(|t| TlsFiles {
            cert_file: base.join(t.cert_file),
            key_file: base.join(t.key_file),
            client_ca_file: t.client_ca_file.map(|p| base.join(p)),
        });
        if let Some(t) = &tls {
            let files = [
                ("cert_file", Some(&t.cert_file)),
                ("key_file", Some(&t.key_file)),
                ("client_ca_file", t.client_ca_file.as_ref()),
            ];
            for (field, path) in files {
                if let Some(path) = path.filter(|p| !p.is_file()) {
                    bad(format!("{section}.tls.{field}"), format!("no such file: {}", path.display()));
                }
            }
        }
        tls
    };
    let tls = tls_files("grpc", raw.grpc.tls);
    let http_tls = tls_files("http", raw.http.tls);
    let bearer_token = match raw.http.bearer_token_file.as_ref().map(|p| base.join(p)) {
        None => None,
        Some(p) => match std::fs::read_to_string(&p) {
            Ok(t) if t.trim().len() >= 16 && t.trim().bytes().all(|b| b.is_ascii_graphic()) => {
                Some(Secret::new(t.trim()))
            }
            Ok(_) => {
                bad(
                    "http.bearer_token_file".into(),
                    format!("{}: the token must be at least 16 printable ASCII characters", p.display()),
                );
                None
            }
            Err(e) => {
                bad("http.bearer_token_file".into(), format!("cannot read {}: {e}", p.display()));
                None
            }
        },
    };
    if raw.http.token_on_metrics && bearer_token.is_none() && raw.http.bearer_token_file.is_none() {
        bad("http.token_on_metrics".into(), "needs http.bearer_token_file (the token to require)".into());
    }
    if !(1..=65_536).contains(&raw.http.max_in_flight) {
        bad("http.max_in_flight".into(), format!("must be within 1..=65536, got {}", raw.http.max_in_flight));
    }
    let st = &raw.store;
    if !(1..=86_400).contains(&st.resolution_secs) {
        bad("store.resolution_secs".into(), format!("must be within 1..=86400, got {}", st.resolution_secs));
    }
    if !(1.0 / 24.0..=3650.0).contains(&st.retention_days) {
        bad("store.retention_days".into(), format!("must be within 1/24..=3650, got {}", st.retention_days));
    }
    if !(0.1..=3600.0).contains(&st.flush_interval_secs) {
        bad("store.flush_interval_secs".into(), format!("must be within 0.1..=3600, got {}", st.flush_interval_secs));
    }
    if !(1..=65_536).contains(&st.cache_mib) {
        bad("store.cache_mib".into(), format!("must be within 1..=65536, got {}", st.cache_mib));
    }
    let store = StoreSettings {
        path: st.path.as_ref().map(|p| base.join(p)),
        resolution: Duration::from_secs(st.resolution_secs.clamp(1, 86_400)),
        retention: crate::time::secs_within(st.retention_days * 86_400.0, 3600.0, 3650.0 * 86_400.0),
        flush_interval: crate::time::secs_within(st.flush_interval_secs, 0.1, 3600.0),
        cache_bytes: (st.cache_mib.clamp(1, 65_536) as usize) << 20,
    };
    let fc = &raw.forecast;
    if fc.refit_threads > 256 {
        bad(
            "forecast.refit_threads".into(),
            format!("must be within 0..=256 (0: one per core), got {}", fc.refit_threads),
        );
    }
    if !(10.0..=86_400.0).contains(&fc.refit_interval_secs) {
        bad(
            "forecast.refit_interval_secs".into(),
            format!("must be within 10..=86400, got {}", fc.refit_interval_secs),
        );
    }
    if !(0.0..=86_400.0).contains(&fc.first_fit_wait_secs) {
        bad("forecast.first_fit_wait_secs".into(), format!("must be within 0..=86400, got {}", fc.first_fit_wait_secs));
    }
    if !(10.0..=30.0 * 86_400.0).contains(&fc.reselect_interval_secs) {
        bad(
            "forecast.reselect_interval_secs".into(),
            format!("must be within 10..=2592000, got {}", fc.reselect_interval_secs),
        );
    }
    if !(1.0 / 24.0..=3650.0).contains(&fc.history_days) {
        bad("forecast.history_days".into(), format!("must be within 1/24..=3650, got {}", fc.history_days));
    } else if fc.history_days > st.retention_days {
        bad(
            "forecast.history_days".into(),
            format!(
                "{} exceeds store.retention_days {}: that history is never kept",
                fc.history_days, st.retention_days
            ),
        );
    }
    if !(1..=100).contains(&fc.origins) {
        bad("forecast.origins".into(), format!("must be within 1..=100, got {}", fc.origins));
    }
    if fc.quantiles.is_empty() {
        bad("forecast.quantiles".into(), "must list at least one quantile, e.g. [0.5, 0.9]".into());
    }
    if let Some(q) = fc.quantiles.iter().find(|q| !(**q > 0.0 && **q < 1.0)) {
        bad("forecast.quantiles".into(), format!("each must be strictly between 0 and 1, got {q}"));
    }
    let resolution = st.resolution_secs.max(1);
    let mut seasons = Vec::new();
    for &p in &fc.seasons_secs {
        if p % resolution != 0 || p / resolution < 2 {
            bad(
                "forecast.seasons_secs".into(),
                format!("{p} is not a whole number (of at least 2) of store.resolution_secs {resolution}"),
            );
        } else {
            seasons.push((p / resolution) as usize);
        }
    }
    seasons.sort_unstable();
    seasons.dedup();
    let mut quantiles = fc.quantiles.clone();
    quantiles.sort_by(f64::total_cmp);
    quantiles.dedup();
    let forecast = ForecastSettings {
        enabled: fc.enabled,
        refit_interval: crate::time::secs_within(fc.refit_interval_secs, 10.0, 86_400.0),
        reselect_interval: crate::time::secs_within(fc.reselect_interval_secs, 10.0, 30.0 * 86_400.0),
        history: crate::time::secs_within(fc.history_days * 86_400.0, 3600.0, 3650.0 * 86_400.0),
        origins: fc.origins.clamp(1, 100),
        quantiles,
        seasons,
        refit_threads: fc.refit_threads,
        first_fit_wait: crate::time::secs_within(fc.first_fit_wait_secs, 0.0, 86_400.0),
    };
    let sizing = validate_sizing(&raw.sizing, &forecast, &mut bad);
    let pools = validate_pools(&raw.pools, &mut bad);
    let reservations = validate_reservations(&raw.reservations, &pools, &mut bad);
    let kubernetes = validate_kubernetes(raw.kubernetes, base, &mut bad);
    let d = &raw.defaults;
    if d.min_replicas > d.max_replicas {
        bad(
            "defaults.min_replicas".into(),
            format!("{} exceeds defaults.max_replicas {}", d.min_replicas, d.max_replicas),
        );
    }
    if raw.workloads.is_empty() {
        bad("workloads".into(), "must list at least one workload".into());
    }

    let mut seen = HashSet::new();
    let mut workloads = Vec::new();
    for (i, w) in raw.workloads.into_iter().enumerate() {
        let at = |field: &str| format!("workloads[{i}].{field}");
        if let Err(why) = check_k8s_name(&w.name, 253, true) {
            bad(at("name"), why);
        }
        if let Err(why) = check_k8s_name(&w.namespace, 63, false) {
            bad(at("namespace"), why);
        }
        if !seen.insert(workload_key(&w.namespace, &w.name)) {
            bad(at("name"), format!("workload `{}` appears twice in namespace `{}`", w.name, w.namespace));
        }
        // What the config left out and was filled in, for `check-config` to print.
        let mut assumed = Vec::new();
        let target = w.target.unwrap_or_else(|| {
            assumed.push("target: in-flight requests (`concurrency`)".to_string());
            raw::RawTarget { signal: Signal::Concurrency, per_replica: None }
        });
        let min_replicas = w.min_replicas.unwrap_or(d.min_replicas);
        let max_replicas = w.max_replicas.unwrap_or(d.max_replicas);
        if w.min_replicas.is_none() || w.max_replicas.is_none() {
            assumed.push(format!(
                "replicas: {min_replicas}..={max_replicas} (defaults.min_replicas / max_replicas where not set)"
            ));
        }
        if max_replicas == 0 || max_replicas > MAX_REPLICAS {
            bad(at("max_replicas"), format!("must be within 1..={MAX_REPLICAS}, got {max_replicas}"));
        }
        if min_replicas > max_replicas {
            bad(at("min_replicas"), format!("{min_replicas} exceeds max_replicas {max_replicas}"));
        }
        let activation_threshold = w.activation_threshold.unwrap_or(d.activation_threshold);
        if !(activation_threshold.is_finite() && activation_threshold >= 0.0) {
            bad(at("activation_threshold"), format!("must be a finite number >= 0, got {activation_threshold}"));
        }
        let signals = match &w.signals {
            Some(list) => {
                if !list.contains(&target.signal) {
                    bad(at("target.signal"), format!("`{}` is not in this workload's signals", target.signal));
                }
                list.clone()
            }
            None => {
                let mut list = Signal::DEFAULT.to_vec();
                if !list.contains(&target.signal) {
                    list.push(target.signal);
                }
                list
            }
        };
        let roles = roles::validate_roles(
            w.roles,
            &roles::RoleDefaults { model: &w.model, min_replicas, max_replicas },
            profiles,
            &at,
            &mut bad,
        );
        let signals =
            if roles.is_empty() { signals } else { roles::role_signals(w.signals.is_some(), signals, &at, &mut bad) };
        for (field, message) in w.source.problems() {
            bad(at(&format!("source.{field}")), message);
        }
        let stale_after = match w.stale_after_secs {
            Some(s) if (0.1..=86_400.0).contains(&s) => Duration::from_secs_f64(s),
            Some(s) => {
                bad(at("stale_after_secs"), format!("must be within 0.1..=86400, got {s}"));
                Duration::ZERO
            }
            None => w.source.interval() * 3,
        };
        let Some(profile) = profiles.get(&w.model) else {
            let known: Vec<&str> = profiles.keys().map(String::as_str).collect();
            bad(at("model"), format!("unknown model profile `{}`; known: {}", w.model, known.join(", ")));
            continue;
        };
        let per_replica = match (target.per_replica, target.signal) {
            (Some(v), _) => v,
            (None, Signal::Concurrency) => {
                assumed.push(format!(
                    "target.per_replica: {}, the `{}` profile's concurrency_per_replica",
                    profile.concurrency_per_replica, profile.name
                ));
                profile.concurrency_per_replica
            }
            (None, other) => {
                bad(
                    at("target.per_replica"),
                    format!("is required for signal `{other}` (the profile gives a default only for `concurrency`)"),
                );
                continue;
            }
        };
        if !(per_replica.is_finite() && per_replica > 0.0) {
            bad(at("target.per_replica"), format!("must be a finite number > 0, got {per_replica}"));
        }
        if let Some(why) = w.shape.as_ref().and_then(|s| roles::shape_problem(profile, s)) {
            bad(at("shape"), why);
        }
        workloads.push(Arc::new(Workload {
            name: w.name,
            namespace: w.namespace,
            profile: profile.clone(),
            min_replicas,
            max_replicas,
            signals,
            target: Target { signal: target.signal, per_replica },
            activation_threshold,
            stale_after,
            source: w.source,
            assumed,
            shadow: w.shadow,
            shape: w.shape,
            roles,
        }));
    }

    if !problems.is_empty() {
        return Err(ConfigError::Invalid(problems));
    }
    Ok(Settings {
        origin: origin.to_string(),
        grpc: GrpcSettings { listen: raw.grpc.listen, tls },
        http: HttpSettings {
            listen: raw.http.listen,
            tls: http_tls,
            bearer_token,
            token_on_metrics: raw.http.token_on_metrics,
            max_in_flight: raw.http.max_in_flight.clamp(1, 65_536),
        },
        tick_interval: Duration::from_secs_f64(raw.tick_interval_secs),
        log_every_decision: raw.log_every_decision,
        store,
        forecast,
        sizing,
        pools,
        reservations,
        workloads,
        kubernetes,
    })
}

/// The HPA's replica counts are int32.
const MAX_REPLICAS: u32 = i32::MAX as u32;
