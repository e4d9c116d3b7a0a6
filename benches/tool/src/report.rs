//! The summary of a run: throughput, errors and latency, as text close to
//! etcd's benchmark report or as one line of JSON.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// The percentiles the text report lists, as etcd's does.
pub const PERCENTILES: [f64; 8] = [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// The latencies of the successful requests, every sample kept (8 bytes a
/// request), so percentiles are exact.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted: Vec<u64>,
}

impl Latencies {
    /// Latencies from samples in nanoseconds, in any order.
    pub fn new(mut nanos: Vec<u64>) -> Self {
        nanos.sort_unstable();
        Self { sorted: nanos }
    }

    /// The number of samples.
    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    /// The smallest sample, in ms (0 without samples).
    pub fn min_ms(&self) -> f64 {
        ms(self.sorted.first().copied().unwrap_or(0))
    }

    /// The largest sample, in ms (0 without samples).
    pub fn max_ms(&self) -> f64 {
        ms(self.sorted.last().copied().unwrap_or(0))
    }

    /// The mean, in ms (0 without samples).
    pub fn mean_ms(&self) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let sum: u128 = self.sorted.iter().map(|&n| u128::from(n)).sum();
        ms_f(sum as f64 / self.sorted.len() as f64)
    }

    /// The population standard deviation, in ms, as etcd computes it.
    pub fn stddev_ms(&self) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let mean = self.mean_ms();
        let var = self.sorted.iter().map(|&n| (ms(n) - mean).powi(2)).sum::<f64>() / self.sorted.len() as f64;
        var.sqrt()
    }

    /// The `p`th percentile (0 < p <= 100), in ms, by nearest rank: the
    /// smallest sample that at least `p`% of the samples do not exceed.
    /// With 1000 samples, p99.9 is the 999th smallest and p100 the largest.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        let n = self.sorted.len();
        if n == 0 {
            return 0.0;
        }
        // The epsilon keeps 99.9% of 1000 at rank 999, not 1000 (0.999 * 1000
        // is 999.0000000000001 in floating point).
        let rank = ((p / 100.0) * n as f64 - 1e-9).ceil().clamp(1.0, n as f64) as usize;
        ms(self.sorted[rank - 1])
    }

    /// etcd's response time histogram: ten equal-width buckets from the
    /// fastest to the slowest sample, as (upper bound in ms, count); the
    /// first mark holds the samples equal to the fastest.
    pub fn histogram(&self) -> Vec<(f64, usize)> {
        let (Some(&lo), Some(&hi)) = (self.sorted.first(), self.sorted.last()) else {
            return Vec::new();
        };
        let marks: Vec<u64> = (0..=10u64).map(|i| lo + (hi - lo) * i / 10).collect();
        let mut counts = vec![0usize; marks.len()];
        let mut bucket = 0;
        for &s in &self.sorted {
            while s > marks[bucket] {
                bucket += 1;
            }
            counts[bucket] += 1;
        }
        marks.into_iter().map(ms).zip(counts).collect()
    }
}

fn ms(nanos: u64) -> f64 {
    ms_f(nanos as f64)
}

fn ms_f(nanos: f64) -> f64 {
    nanos / 1e6
}

/// Failed requests of one kind: how many, and one message as an example.
#[derive(Debug, Clone, Default)]
pub struct ErrorCount {
    /// How many requests failed this way.
    pub count: u64,
    /// The message of the first of them.
    pub example: String,
}

/// What was run, for the report's header and JSON.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// `put` or `range`.
    pub workload: String,
    /// The read consistency (`l`, `s`, `e`) of a range.
    pub consistency: Option<String>,
    /// The endpoints the connections went to.
    pub endpoints: Vec<String>,
    /// gRPC connections.
    pub conns: usize,
    /// Requests in flight.
    pub clients: usize,
    /// Requests sent.
    pub total: u64,
    /// Key size in bytes.
    pub key_size: usize,
    /// Value size in bytes.
    pub value_size: usize,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// What was run.
    pub info: RunInfo,
    /// From the first request sent to the last answered.
    pub elapsed: Duration,
    /// Latencies of the successful requests.
    pub latencies: Latencies,
    /// Failed requests by reason: the node's `wasmraft-error` reason, else
    /// the gRPC code, or `client-timeout` / `unreachable`.
    pub errors: BTreeMap<String, ErrorCount>,
    /// Successful reads that found no key.
    pub empty_reads: u64,
}

impl Report {
    /// Requests that failed.
    pub fn error_count(&self) -> u64 {
        self.errors.values().map(|e| e.count).sum()
    }

    /// Successful requests per second (errors excluded, as etcd does).
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 { self.latencies.count() as f64 / secs } else { 0.0 }
    }

    /// The text summary, close to etcd's benchmark report but in ms.
    pub fn text(&self) -> String {
        let l = &self.latencies;
        let mut out = String::new();
        let _ = writeln!(out, "\nSummary:");
        let _ = writeln!(out, "  Total:\t{:.4} secs.", self.elapsed.as_secs_f64());
        let _ = writeln!(out, "  Slowest:\t{:.3} ms.", l.max_ms());
        let _ = writeln!(out, "  Fastest:\t{:.3} ms.", l.min_ms());
        let _ = writeln!(out, "  Average:\t{:.3} ms.", l.mean_ms());
        let _ = writeln!(out, "  Stddev:\t{:.3} ms.", l.stddev_ms());
        let _ = writeln!(out, "  Requests/sec:\t{:.1}", self.rate());
        let hist = l.histogram();
        if !hist.is_empty() {
            let _ = writeln!(out, "\nResponse time histogram (ms):");
            let most = hist.iter().map(|&(_, c)| c).max().unwrap_or(1).max(1);
            for (mark, count) in hist {
                let bar = "∎".repeat(count * 40 / most);
                let _ = writeln!(out, "  {mark:.3} [{count}]\t|{bar}");
            }
            let _ = writeln!(out, "\nLatency distribution:");
            for p in PERCENTILES {
                let _ = writeln!(out, "  {p}% in {:.3} ms.", l.percentile_ms(p));
            }
        }
        let _ = writeln!(
            out,
            "\nRequests: {} of {} done, {} ok, {} errors; latency ms: avg {:.3} p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
            l.count() as u64 + self.error_count(),
            self.info.total,
            l.count(),
            self.error_count(),
            l.mean_ms(),
            l.percentile_ms(50.0),
            l.percentile_ms(90.0),
            l.percentile_ms(99.0),
            l.percentile_ms(99.9),
            l.max_ms(),
        );
        if self.empty_reads > 0 {
            let _ = writeln!(
                out,
                "Empty reads: {} found no key (run `put` with the same --key-space first, or `range --populate`)",
                self.empty_reads
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(out, "\nError distribution:");
            for (reason, e) in &self.errors {
                let _ = writeln!(out, "  [{}]\t{reason}: {}", e.count, e.example);
            }
        }
        out
    }

    /// The summary as one line of JSON, for scripts. Times are in ms
    /// except `elapsed_s`.
    pub fn json(&self) -> String {
        let l = &self.latencies;
        let i = &self.info;
        let endpoints: Vec<String> = i.endpoints.iter().map(|e| json_str(e)).collect();
        let errors: Vec<String> =
            self.errors.iter().map(|(reason, e)| format!("{}:{}", json_str(reason), e.count)).collect();
        format!(
            concat!(
                "{{\"workload\":{},\"consistency\":{},\"endpoints\":[{}],\"conns\":{},\"clients\":{},",
                "\"total\":{},\"key_size\":{},\"value_size\":{},\"ok\":{},\"errors\":{},\"error_counts\":{{{}}},",
                "\"empty_reads\":{},\"elapsed_s\":{:.4},\"requests_per_s\":{:.1},\"latency_ms\":{{\"min\":{:.3},",
                "\"avg\":{:.3},\"stddev\":{:.3},\"p50\":{:.3},\"p90\":{:.3},\"p99\":{:.3},\"p99_9\":{:.3},\"max\":{:.3}}}}}"
            ),
            json_str(&i.workload),
            i.consistency.as_deref().map_or("null".to_string(), json_str),
            endpoints.join(","),
            i.conns,
            i.clients,
            i.total,
            i.key_size,
            i.value_size,
            l.count(),
            self.error_count(),
            errors.join(","),
            self.empty_reads,
            self.elapsed.as_secs_f64(),
            self.rate(),
            l.min_ms(),
            l.mean_ms(),
            l.stddev_ms(),
            l.percentile_ms(50.0),
            l.percentile_ms(90.0),
            l.percentile_ms(99.0),
            l.percentile_ms(99.9),
            l.max_ms(),
        )
    }
}

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of 1..=n ms, shuffled.
    fn ms_samples(n: u64) -> Latencies {
        let mut v: Vec<u64> = (1..=n).map(|i| i * 1_000_000).collect();
        v.reverse();
        v.swap(0, (n / 2) as usize);
        Latencies::new(v)
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let l = ms_samples(1000);
        assert_eq!(l.percentile_ms(50.0), 500.0);
        assert_eq!(l.percentile_ms(90.0), 900.0);
        assert_eq!(l.percentile_ms(99.0), 990.0);
        assert_eq!(l.percentile_ms(99.9), 999.0);
        assert_eq!(l.percentile_ms(100.0), 1000.0);
        assert_eq!(l.percentile_ms(0.01), 1.0);

        let l = ms_samples(10);
        assert_eq!(l.percentile_ms(10.0), 1.0);
        assert_eq!(l.percentile_ms(50.0), 5.0);
        assert_eq!(l.percentile_ms(90.0), 9.0);
        assert_eq!(l.percentile_ms(99.0), 10.0);
        assert_eq!(l.percentile_ms(99.9), 10.0);
    }

    #[test]
    fn one_sample_is_every_percentile_and_none_gives_zeros() {
        let l = Latencies::new(vec![2_500_000]);
        for p in PERCENTILES {
            assert_eq!(l.percentile_ms(p), 2.5);
        }
        assert_eq!((l.min_ms(), l.max_ms(), l.mean_ms(), l.stddev_ms()), (2.5, 2.5, 2.5, 0.0));
        let none = Latencies::default();
        assert_eq!((none.percentile_ms(99.0), none.mean_ms(), none.stddev_ms()), (0.0, 0.0, 0.0));
        assert!(none.histogram().is_empty());
    }

    #[test]
    fn mean_stddev_min_max() {
        // 2, 4, 4, 4, 5, 5, 7, 9 ms: mean 5, population stddev 2.
        let l = Latencies::new([2, 4, 4, 4, 5, 5, 7, 9].iter().map(|m| m * 1_000_000).collect());
        assert_eq!(l.mean_ms(), 5.0);
        assert!((l.stddev_ms() - 2.0).abs() < 1e-12);
        assert_eq!((l.min_ms(), l.max_ms()), (2.0, 9.0));
    }

    #[test]
    fn histogram_counts_every_sample_once() {
        let l = ms_samples(100);
        let h = l.histogram();
        assert_eq!(h.len(), 11);
        assert_eq!(h.iter().map(|&(_, c)| c).sum::<usize>(), 100);
        assert_eq!(h[0], (1.0, 1));
        assert_eq!(h[10].0, 100.0);
        let same = Latencies::new(vec![5; 4]);
        assert_eq!(same.histogram()[0].1, 4);
    }

    fn report() -> Report {
        let mut errors = BTreeMap::new();
        errors.insert("client-timeout".into(), ErrorCount { count: 2, example: "no answer in 10s".into() });
        Report {
            info: RunInfo {
                workload: "range".into(),
                consistency: Some("l".into()),
                endpoints: vec!["127.0.0.1:7379".into()],
                conns: 1,
                clients: 4,
                total: 12,
                key_size: 8,
                value_size: 256,
            },
            elapsed: Duration::from_secs(2),
            latencies: ms_samples(10),
            errors,
            empty_reads: 3,
        }
    }

    #[test]
    fn the_text_report_reads_like_etcds() {
        let r = report();
        assert_eq!(r.rate(), 5.0);
        let text = r.text();
        for line in [
            "  Total:\t2.0000 secs.",
            "  Average:\t5.500 ms.",
            "  Requests/sec:\t5.0",
            "  50% in 5.000 ms.",
            "  99.9% in 10.000 ms.",
            "Requests: 12 of 12 done, 10 ok, 2 errors",
            "Empty reads: 3",
            "  [2]\tclient-timeout: no answer in 10s",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn the_json_report_is_one_line() {
        let json = report().json();
        assert!(!json.contains('\n'));
        assert!(json.starts_with("{\"workload\":\"range\",\"consistency\":\"l\",\"endpoints\":[\"127.0.0.1:7379\"]"));
        assert!(json.contains("\"ok\":10,\"errors\":2,\"error_counts\":{\"client-timeout\":2}"), "{json}");
        assert!(json.contains("\"requests_per_s\":5.0"), "{json}");
        assert!(json.contains("\"p99_9\":10.000,\"max\":10.000}}"), "{json}");
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
