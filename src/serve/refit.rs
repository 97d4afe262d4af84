//! Keeps each workload's forecast fresh, off the control loop's tick.
//!
//! One worker thread does all the fitting. The engine hands it workloads
//! whose forecast is due (at most one job per workload in flight); the worker
//! reads their history from the store, runs the [`Forecaster`] and sends the
//! result back; the engine picks results up on its next tick. A slow fit
//! delays other forecasts, never a KEDA answer: the scaler only reads what
//! the engine has published.

use std::{
    collections::HashMap,
    panic::{self, AssertUnwindSafe},
    sync::{mpsc, Arc},
    thread,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use serde::Serialize;
use tracing::{debug, warn};

use crate::{
    config::ForecastSettings,
    forecast::{
        auto::{Choice, Selection},
        Forecaster, ForecasterConfig, QuantileForecast, Regime, Seasons, Series,
    },
    serve::outcome::RefitError,
    sources::Signal,
    store::Store,
    time::rfc3339,
    workload::series,
    workload::Workload,
};

/// A forecast as the API and logs show it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ForecastView {
    pub(crate) signal: Signal,
    /// Model name, or `ensemble(a+b)`.
    pub model: String,
    pub regime: Regime,
    /// Backtest MASE of the chosen model; `None` when the history was too short to backtest.
    pub backtest_mase: Option<f64>,
    /// Every candidate's backtest MASE at the last selection, the chosen one first, then best first.
    pub candidates: Vec<(String, f64)>,
    /// When the model was last chosen by backtest (refits in between reuse it).
    pub selected_at: String,
    pub(crate) level_shift: Option<f64>,
    /// When the fit ran.
    pub fitted_at: String,
    /// Time of the first forecast point (one step after the last complete bucket).
    pub start: String,
    /// `start` in Unix seconds.
    #[serde(skip)]
    pub(crate) start_unix: i64,
    pub step_secs: i64,
    /// Steps forecast: the profile's cold start plus the refit interval, so the
    /// look-ahead stays covered until the next refit.
    pub horizon_steps: usize,
    /// Observed points in the history the fit read (gaps not counted).
    pub(crate) history_points: usize,
    pub(crate) fit_ms: f64,
    pub point: Vec<f64>,
    pub quantiles: Vec<QuantileForecast>,
}

/// What a workload's latest refit gave.
pub(crate) type Outcome = Result<Arc<ForecastView>, RefitError>;

struct Job {
    id: u64,
    key: String,
    signal: Signal,
    /// A forecast hours ahead for the spare-capacity plan, selected by its
    /// own backtest over that horizon (not the one sizing uses).
    spare: bool,
    /// How far ahead to forecast: the profile's cold start plus the refit interval.
    lead_secs: f64,
    now: SystemTime,
    settings: Arc<ForecastSettings>,
}

/// A finished refit: the id it was submitted with, for the workload `key`'s `signal`.
pub(crate) struct Done {
    pub(crate) id: u64,
    pub(crate) key: String,
    pub(crate) signal: Signal,
    pub(crate) spare: bool,
    pub(crate) outcome: Outcome,
}

/// The worker thread and its two channels.
pub(crate) struct Refitter {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
}

impl Refitter {
    /// Starts the worker. It stops once the `Refitter` is dropped and its current job ends.
    pub(crate) fn start(store: Arc<Store>) -> Refitter {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel();
        let spawned = thread::Builder::new().name("foresight-refit".into()).spawn(move || {
            let mut selections = Selections::new();
            for job in job_rx {
                let (id, key, signal, spare) = (job.id, job.key.clone(), job.signal, job.spare);
                // A bug in one fit must not stop every later forecast: it becomes that workload's error.
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| refit(&store, &job, &mut selections)))
                    .unwrap_or_else(|_| {
                        selections.remove(&selection_key(&key, signal, spare));
                        Err(RefitError::Panicked)
                    });
                match &outcome {
                    Ok(f) => debug!(workload = %key, model = %f.model, regime = f.regime.as_str(), fit_ms = f.fit_ms, "forecast refitted"),
                    Err(e) => debug!(workload = %key, error = %e, "no forecast"),
                }
                if done_tx.send(Done { id, key, signal, spare, outcome }).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            // Without the thread, submitted jobs just never finish: forecasts stay absent, decisions stay reactive.
            warn!(error = %e, "could not start the forecast worker; forecasts are off");
        }
        Refitter { jobs, done }
    }

    /// Queue a refit of `w`'s `signal` as of `now`; its [`Done`] carries `id`.
    pub(crate) fn submit(
        &self,
        id: u64,
        w: &Workload,
        signal: Signal,
        now: SystemTime,
        settings: &Arc<ForecastSettings>,
    ) {
        let cold_start = w
            .roles
            .iter()
            .map(|r| r.profile.cold_start_secs.total_secs())
            .fold(w.profile.cold_start_secs.total_secs(), f64::max);
        let job = Job {
            id,
            key: w.key(),
            signal,
            spare: false,
            // Until the next refit, [now, now + cold start] must stay covered.
            lead_secs: cold_start + settings.refit_interval.as_secs_f64(),
            now,
            settings: settings.clone(),
        };
        // A closed channel means the worker is gone; the workload just keeps its last forecast.
        let _ = self.jobs.send(job);
    }

    /// Queue a forecast of `w`'s target `lead_secs` ahead for the spare-capacity plan.
    pub(crate) fn submit_spare(
        &self,
        id: u64,
        w: &Workload,
        now: SystemTime,
        settings: &Arc<ForecastSettings>,
        lead_secs: f64,
    ) {
        let job =
            Job { id, key: w.key(), signal: w.target.signal, spare: true, lead_secs, now, settings: settings.clone() };
        let _ = self.jobs.send(job);
    }

    /// Refits finished since the last call.
    pub(crate) fn finished(&self) -> Vec<Done> {
        self.done.try_iter().collect()
    }
}

/// Each forecast series' last model selection: what it was made for (signal,
/// horizon, settings), the selection, and when it was made.
type Selections = HashMap<String, (SelectionKey, Selection, SystemTime)>;

#[derive(PartialEq)]
struct SelectionKey {
    signal: Signal,
    horizon: usize,
    settings: ForecastSettings,
}

/// Where a series' selection is kept: the spare-capacity forecast's apart
/// from sizing's, as each is backtested over its own horizon.
fn selection_key(key: &str, signal: Signal, spare: bool) -> String {
    let s = series(key, signal);
    if spare {
        s + "#spare"
    } else {
        s
    }
}

/// Reads the history and fits: a full selection when the last one is older
/// than the reselect interval (or was made for another signal, horizon or
/// settings), else a refit of the models it chose.
fn refit(store: &Store, job: &Job, selections: &mut Selections) -> Outcome {
    let t0 = Instant::now();
    let step = store.resolution();
    let from = job.now.checked_sub(job.settings.history).unwrap_or(UNIX_EPOCH);
    let history =
        store.range(&series(&job.key, job.signal), from, job.now).map_err(|e| RefitError::History(e.to_string()))?;
    let step_secs = step.as_secs().max(1) as i64;
    let start = history.start.duration_since(UNIX_EPOCH).map_err(|_| RefitError::BeforeEpoch)?.as_secs();
    let horizon = ((job.lead_secs / step_secs as f64).ceil() as usize).max(1);
    let s = Series { start: start as i64, step: step_secs, values: history.values };
    // A signal that stopped reporting is not forecast from its last value.
    let silent = s.values.iter().rev().take_while(|v| !v.is_finite()).count();
    if silent > horizon.max(2) && silent < s.len() {
        return Err(RefitError::Silent { signal: job.signal, secs: silent as i64 * step_secs });
    }
    let seasons = Seasons::new(job.settings.seasons.clone())?;
    let forecaster = Forecaster::new(ForecasterConfig {
        seasons: Some(seasons),
        origins: job.settings.origins,
        quantiles: job.settings.quantiles.clone(),
        ..ForecasterConfig::default()
    })?;
    let key = SelectionKey { signal: job.signal, horizon, settings: job.settings.as_ref().clone() };
    let at = selection_key(&job.key, job.signal, job.spare);
    let choice = match selections.get(&at) {
        Some((made_for, sel, at))
            if *made_for == key
                && job.now.duration_since(*at).is_ok_and(|age| age < job.settings.reselect_interval) =>
        {
            Choice::Reuse(sel.clone())
        }
        _ => Choice::Auto,
    };
    let f = match forecaster.forecast(&s, horizon, &choice) {
        Ok(f) => f,
        Err(e) => {
            selections.remove(&at);
            return Err(e.into());
        }
    };
    let selected_at = match selections.get(&at) {
        Some((_, _, at)) if f.reused_selection => *at,
        _ => job.now,
    };
    if f.selection.regime.is_some() {
        selections.insert(at, (key, f.selection.clone(), selected_at));
    } else {
        selections.remove(&at);
    }
    let time = |t: i64| rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64));
    Ok(Arc::new(ForecastView {
        signal: job.signal,
        model: f.model,
        regime: f.regime,
        backtest_mase: f.backtest_mase,
        candidates: f.candidates,
        selected_at: rfc3339(selected_at),
        level_shift: f.level_shift,
        fitted_at: rfc3339(job.now),
        start: time(f.start),
        start_unix: f.start,
        step_secs: f.step,
        horizon_steps: horizon,
        history_points: s.values.iter().filter(|v| v.is_finite()).count(),
        fit_ms: t0.elapsed().as_secs_f64() * 1e3,
        point: f.point,
        quantiles: f.quantiles,
    }))
}
