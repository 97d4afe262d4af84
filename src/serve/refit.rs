//! Keeps each workload's forecast fresh, off the control loop's tick.
//!
//! One worker thread does all the fitting. The engine hands it workloads
//! whose forecast is due (at most one job per workload in flight); the worker
//! reads their history from the store, runs the [`Forecaster`] and sends the
//! result back; the engine picks results up on its next tick. A slow fit
//! delays other forecasts, never a KEDA answer: the scaler only reads what
//! the engine has published.

use std::{
    collections::{HashMap, VecDeque},
    panic::{self, AssertUnwindSafe},
    sync::{mpsc, Arc, Condvar, Mutex},
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
    sources::prometheus::LATE_DATA_SECS,
    sources::Signal,
    sources::SourceConfig,
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
    /// The instant the fit is as of: its grid point (history up to there,
    /// less what the source may still revise). The fit ran after it.
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
    /// The grid point the fit is for ([`grid`]): every replica fits the same instants.
    now: SystemTime,
    /// When the fit became due in this process (the refit-lag metric counts
    /// from it): its planned time, or when it was queued for a first fit,
    /// whose grid point is already past.
    due: SystemTime,
    /// History newer than this before `now` is left out: a shared source may
    /// still revise it, so replicas fitting at different moments would read
    /// different values.
    lag_secs: f64,
    settings: Arc<ForecastSettings>,
}

/// A finished refit: the id it was submitted with, for the workload `key`'s `signal`.
pub(crate) struct Done {
    pub(crate) id: u64,
    pub(crate) key: String,
    pub(crate) signal: Signal,
    pub(crate) spare: bool,
    /// The grid point the fit was as of.
    pub(crate) at: SystemTime,
    pub(crate) outcome: Outcome,
}

/// The worker threads, their queue and their results.
pub(crate) struct Refitter {
    queue: Arc<Queue>,
    done: mpsc::Receiver<Done>,
    /// Jobs submitted whose result has not been sent yet.
    busy: Arc<std::sync::atomic::AtomicUsize>,
    /// Fit on the caller's thread instead (the simulator, which has no wall
    /// clock to race): the result still lands on the next tick, as a
    /// worker's does when it finishes within a tick.
    inline: Option<Inline>,
}

/// The state a worker keeps, held by the caller when fitting inline.
struct Inline {
    store: Arc<Store>,
    selections: Mutex<Selections>,
    done: std::cell::RefCell<VecDeque<Done>>,
}

/// Jobs waiting for a worker. Workers stop once the `Refitter` is dropped.
#[derive(Default)]
struct Queue {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    ready: Condvar,
}

impl Queue {
    fn push(&self, job: Job) {
        lock(&self.jobs).0.push_back(job);
        self.ready.notify_one();
    }

    /// The next job; `None` once closed.
    fn pop(&self) -> Option<Job> {
        let mut q = lock(&self.jobs);
        loop {
            if q.1 {
                return None;
            }
            if let Some(job) = q.0.pop_front() {
                return Some(job);
            }
            q = self.ready.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn close(&self) {
        lock(&self.jobs).1 = true;
        self.ready.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Refitter {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// Fitting is CPU-bound and never urgent next to a KEDA answer or a poll:
/// workers run at a lower priority (nice 10), so those take a core first.
fn lower_priority() {
    // SAFETY: setpriority on this thread's id changes only this thread's nice value.
    #[cfg(target_os = "linux")]
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

impl Refitter {
    /// Starts `threads` workers (0: one per core).
    pub(crate) fn start(store: Arc<Store>, threads: usize) -> Refitter {
        let threads = if threads == 0 { thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
        let queue = Arc::new(Queue::default());
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (done_tx, done) = mpsc::channel();
        // Each series' selection, shared: a worker takes its entry out while it fits.
        let selections = Arc::new(Mutex::new(Selections::new()));
        let mut started = 0;
        for k in 0..threads {
            let (queue, store, selections, done_tx, busy) =
                (queue.clone(), store.clone(), selections.clone(), done_tx.clone(), busy.clone());
            let spawned = thread::Builder::new().name(format!("foresight-refit-{k}")).spawn(move || {
                lower_priority();
                while let Some(job) = queue.pop() {
                    let (id, key, signal, spare) = (job.id, job.key.clone(), job.signal, job.spare);
                    let at = selection_key(&key, signal, spare);
                    let mut mine: Selections = lock(&selections).remove_entry(&at).into_iter().collect();
                    // A bug in one fit must not stop every later forecast: it becomes that workload's error.
                    let outcome = panic::catch_unwind(AssertUnwindSafe(|| refit(&store, &job, &mut mine)))
                        .unwrap_or_else(|_| {
                            mine.clear();
                            Err(RefitError::Panicked)
                        });
                    lock(&selections).extend(mine);
                    let lag = SystemTime::now().duration_since(job.due).map_or(0.0, |d| d.as_secs_f64());
                    crate::telemetry::refit_done(outcome.is_ok(), lag);
                    match &outcome {
                        Ok(f) => debug!(workload = %key, signal = %signal, spare, at = %rfc3339(job.now), model = %f.model, fit_ms = f.fit_ms, "forecast refitted"),
                        Err(e) => debug!(workload = %key, error = %e, "no forecast"),
                    }
                    let sent = done_tx.send(Done { id, key, signal, spare, at: job.now, outcome });
                    busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    if sent.is_err() {
                        return;
                    }
                }
            });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => warn!(error = %e, "could not start a forecast worker"),
            }
        }
        if started == 0 {
            // Without a worker, submitted jobs never finish: forecasts stay absent, decisions stay reactive.
            warn!("no forecast worker started; forecasts are off");
        }
        Refitter { queue, done, busy, inline: None }
    }

    /// A refitter with no threads: each job is fitted when submitted, and
    /// its result is handed over by the next [`Refitter::finished`].
    pub(crate) fn inline(store: Arc<Store>) -> Refitter {
        let (_, done) = mpsc::channel();
        let inline = Inline { store, selections: Mutex::new(Selections::new()), done: Default::default() };
        Refitter { queue: Arc::default(), done, busy: Arc::default(), inline: Some(inline) }
    }

    /// Jobs waiting for a worker.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.queue.jobs).0.len()
    }

    /// Blocks until every submitted job's result is ready for
    /// [`Refitter::finished`] (tests that step a threaded engine like an inline one).
    #[cfg(test)]
    pub(crate) fn wait_idle(&self) {
        while self.busy.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn push(&self, job: Job) {
        let Some(inline) = &self.inline else {
            self.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.queue.push(job);
            return;
        };
        let at = selection_key(&job.key, job.signal, job.spare);
        let mut selections = lock(&inline.selections);
        let mut mine: Selections = selections.remove_entry(&at).into_iter().collect();
        let outcome =
            panic::catch_unwind(AssertUnwindSafe(|| refit(&inline.store, &job, &mut mine))).unwrap_or_else(|_| {
                mine.clear();
                Err(RefitError::Panicked)
            });
        selections.extend(mine);
        let (id, key, signal, spare, at) = (job.id, job.key, job.signal, job.spare, job.now);
        inline.done.borrow_mut().push_back(Done { id, key, signal, spare, at, outcome });
    }

    /// Queue a refit of `w`'s `signal` as of grid point `now`; its [`Done`] carries `id`.
    pub(crate) fn submit(
        &self,
        id: u64,
        w: &Workload,
        signal: Signal,
        now: SystemTime,
        due: SystemTime,
        settings: &Arc<ForecastSettings>,
    ) {
        let lag_secs = settle_secs(w);
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
            // Until the next refit, [now, now + cold start] must stay covered, from the history's end on.
            lead_secs: cold_start + settings.refit_interval.as_secs_f64() + lag_secs,
            now,
            due,
            lag_secs,
            settings: settings.clone(),
        };
        self.push(job);
    }

    /// Queue a forecast of `w`'s target `lead_secs` ahead for the spare-capacity plan.
    pub(crate) fn submit_spare(
        &self,
        id: u64,
        w: &Workload,
        now: SystemTime,
        due: SystemTime,
        settings: &Arc<ForecastSettings>,
        lead_secs: f64,
    ) {
        let lag_secs = settle_secs(w);
        let job = Job {
            id,
            key: w.key(),
            signal: w.target.signal,
            spare: true,
            lead_secs: lead_secs + lag_secs,
            now,
            due,
            lag_secs,
            settings: settings.clone(),
        };
        self.push(job);
    }

    /// Refits finished since the last call.
    pub(crate) fn finished(&self) -> Vec<Done> {
        match &self.inline {
            Some(inline) => inline.done.borrow_mut().drain(..).collect(),
            None => self.done.try_iter().collect(),
        }
    }
}

/// The latest multiple of `every` at or before `now` (Unix time).
pub(crate) fn grid(now: SystemTime, every: std::time::Duration) -> SystemTime {
    phased(now, every, 0.0)
}

/// The latest point of `key`'s grid of `every` at or before `now`: refits
/// and model choices happen on it, so replicas that started apart fit the
/// same history as of the same instants. Each workload's grid is shifted by
/// a phase from its name (whole seconds within `every`), so thousands of
/// workloads spread their fits over the interval instead of all at once.
pub(crate) fn key_grid(now: SystemTime, every: std::time::Duration, key: &str) -> SystemTime {
    // FNV-1a: stable across processes and releases, unlike std's hasher.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let whole = every.as_secs().max(1);
    phased(now, every, (hash % whole) as f64)
}

fn phased(now: SystemTime, every: std::time::Duration, phase: f64) -> SystemTime {
    let every = every.as_secs_f64().max(1.0);
    let secs = now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    UNIX_EPOCH + std::time::Duration::from_secs_f64((((secs - phase) / every).floor() * every + phase).max(0.0))
}

/// How long after a bucket ends `w`'s source may still revise it: a
/// Prometheus source re-reads late data for [`LATE_DATA_SECS`] after its
/// query delay. Scraped history is final when written.
pub(super) fn settle_secs(w: &Workload) -> f64 {
    match &w.source {
        SourceConfig::Prometheus(c) => LATE_DATA_SECS + c.query_delay_secs,
        _ => 0.0,
    }
}

/// Each forecast series' last model selection: what it was made for (signal,
/// horizon, settings), the selection, and when it was made.
type Selections = HashMap<String, (SelectionKey, Selection, SystemTime)>;

#[derive(Clone, PartialEq)]
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
    let step_secs = step.as_secs().max(1) as i64;
    let horizon = ((job.lead_secs / step_secs as f64).ceil() as usize).max(1);
    let seasons = Seasons::new(job.settings.seasons.clone())?;
    let forecaster = Forecaster::new(ForecasterConfig {
        seasons: Some(seasons),
        origins: job.settings.origins,
        quantiles: job.settings.quantiles.clone(),
        ..ForecasterConfig::default()
    })?;
    // The worker count is not a forecast setting: changing it keeps the choices.
    let settings = ForecastSettings { refit_threads: 0, ..job.settings.as_ref().clone() };
    let key = SelectionKey { signal: job.signal, horizon, settings };
    let at = selection_key(&job.key, job.signal, job.spare);
    // Models are chosen on the reselect grid, from the history as of its last
    // point, and refitted in between: a replica that starts mid-interval
    // makes the same choice a running one made at that point.
    let epoch = key_grid(job.now, job.settings.reselect_interval, &at);
    let history_to = |to: SystemTime| -> Result<Series, RefitError> {
        let to = to.checked_sub(std::time::Duration::from_secs_f64(job.lag_secs)).unwrap_or(UNIX_EPOCH);
        let from = to.checked_sub(job.settings.history).unwrap_or(UNIX_EPOCH);
        let h = store.range(&series(&job.key, job.signal), from, to).map_err(|e| RefitError::History(e.to_string()))?;
        let start = h.start.duration_since(UNIX_EPOCH).map_err(|_| RefitError::BeforeEpoch)?.as_secs();
        Ok(Series { start: start as i64, step: step_secs, values: h.values })
    };
    let s = history_to(job.now)?;
    // A signal that stopped reporting is not forecast from its last value.
    let silent = s.values.iter().rev().take_while(|v| !v.is_finite()).count();
    if silent > horizon.max(2) && silent < s.len() {
        return Err(RefitError::Silent { signal: job.signal, secs: silent as i64 * step_secs });
    }
    let kept = selections.get(&at).filter(|(made_for, _, made_at)| *made_for == key && *made_at == epoch);
    let choice = match kept {
        Some((_, sel, _)) => Choice::Reuse(sel.clone()),
        None if job.now > epoch => {
            // This process has no choice from the last grid point: make it now, as of then.
            let then =
                history_to(epoch).and_then(|h| forecaster.forecast(&h, horizon, &Choice::Auto).map_err(Into::into));
            match then {
                Ok(f) if f.selection.regime.is_some() => {
                    selections.insert(at.clone(), (key.clone(), f.selection.clone(), epoch));
                    Choice::Reuse(f.selection)
                }
                // Too little history then: choose afresh each refit until the next grid point.
                _ => Choice::Auto,
            }
        }
        None => Choice::Auto,
    };
    let reusing = matches!(choice, Choice::Reuse(_));
    let f = match forecaster.forecast(&s, horizon, &choice) {
        Ok(f) => f,
        Err(e) => {
            selections.remove(&at);
            return Err(e.into());
        }
    };
    let selected_at = if reusing && f.reused_selection { epoch } else { job.now };
    if !reusing && job.now == epoch && f.selection.regime.is_some() {
        selections.insert(at, (key, f.selection.clone(), epoch));
    } else if !reusing {
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
