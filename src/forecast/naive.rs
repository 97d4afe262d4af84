//! Seasonal naive: each future point repeats the value one season earlier.
//! The baseline every other model has to beat (MASE is scaled by it).

use super::{Fitted, ForecastError, Model, Seasons, Train};

#[derive(Debug, Clone, Copy)]
pub(crate) enum SeasonalNaive {
    /// The shortest season (a day on calendar seasons).
    Daily,
    /// The second season (a week).
    Weekly,
}

impl SeasonalNaive {
    fn period(&self, seasons: &Seasons) -> Option<usize> {
        match self {
            SeasonalNaive::Daily => seasons.periods().first().copied(),
            SeasonalNaive::Weekly => seasons.periods().get(1).copied(),
        }
    }
}

impl Model for SeasonalNaive {
    fn name(&self) -> &'static str {
        match self {
            SeasonalNaive::Daily => "snaive-day",
            SeasonalNaive::Weekly => "snaive-week",
        }
    }

    fn min_len(&self, seasons: &Seasons) -> usize {
        self.period(seasons).unwrap_or(usize::MAX)
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let n = train.len();
        let p = self.period(train.seasons).ok_or_else(|| ForecastError::TooShort {
            model: self.name().into(),
            have: n,
            need: self.min_len(train.seasons),
        })?;
        if n < p {
            return Err(ForecastError::TooShort { model: self.name().into(), have: n, need: p });
        }
        Ok(Box::new(LastCycle(train.values[n - p..].to_vec())))
    }
}

struct LastCycle(Vec<f64>);

impl Fitted for LastCycle {
    fn predict(&self, h: usize) -> Vec<f64> {
        (0..h).map(|k| self.0[k % self.0.len()]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_the_last_cycle() {
        let seasons = Seasons::new(vec![3, 6]).unwrap();
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        let train = Train { values: &values, start: 0, step: 60, seasons: &seasons };
        assert_eq!(SeasonalNaive::Daily.fit(&train).unwrap().predict(4), vec![5.0, 6.0, 7.0, 5.0]);
        assert_eq!(SeasonalNaive::Weekly.fit(&train).unwrap().predict(2), vec![2.0, 3.0]);
        let short = Train { values: &values[..5], ..train };
        assert!(matches!(SeasonalNaive::Weekly.fit(&short), Err(ForecastError::TooShort { need: 6, .. })));
    }
}
