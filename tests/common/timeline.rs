//! Checks a Chrome-trace JSON timeline: its structure, one group per lane with a host and a
//! GPU track, and no two spans overlapping on one track.

use std::collections::HashMap;

/// Parses `json` and checks it; returns the number of complete (`X`) events per track name,
/// keyed `"<group>/<track>"`.
pub fn check_chrome_trace(json: &str, lanes: &[&str]) -> HashMap<String, usize> {
    let v: serde_json::Value = serde_json::from_str(json).expect("the timeline is valid JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents is an array");
    let mut groups: HashMap<u64, String> = HashMap::new();
    let mut tracks: HashMap<(u64, u64), String> = HashMap::new();
    type Span = (f64, f64, String);
    let mut spans: HashMap<(u64, u64), Vec<Span>> = HashMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        let pid = e["pid"].as_u64().expect("every event has a numeric pid");
        match ph {
            "M" => {
                let name = e["args"]["name"].as_str().expect("metadata names its track").to_string();
                match e["name"].as_str() {
                    Some("process_name") => assert!(groups.insert(pid, name).is_none(), "pid {pid} named twice"),
                    Some("thread_name") => {
                        let tid = e["tid"].as_u64().expect("thread metadata has a tid");
                        assert!(tracks.insert((pid, tid), name).is_none(), "track {pid}/{tid} named twice");
                    }
                    other => panic!("unexpected metadata {other:?}"),
                }
            }
            "X" => {
                let tid = e["tid"].as_u64().expect("span has a tid");
                let ts = e["ts"].as_f64().expect("span has ts");
                let dur = e["dur"].as_f64().expect("span has dur");
                assert!(ts >= 0.0 && dur >= 0.0, "negative time in {e}");
                let name = e["name"].as_str().expect("span has a name").to_string();
                assert!(e["cat"].as_str().is_some(), "span has a category (library)");
                spans.entry((pid, tid)).or_default().push((ts, dur, name));
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    let mut counts = HashMap::new();
    for (key, list) in &mut spans {
        let group = groups.get(&key.0).unwrap_or_else(|| panic!("pid {} has no process_name", key.0));
        let track = tracks.get(key).unwrap_or_else(|| panic!("track {key:?} has no thread_name"));
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in list.windows(2) {
            let (end, next) = (w[0].0 + w[0].1, w[1].0);
            // The JSON prints three decimals: allow one unit of rounding.
            assert!(
                end <= next + 0.001,
                "spans overlap on {group}/{track}: {:?} ends at {end}, {:?} starts at {next}",
                w[0],
                w[1]
            );
        }
        counts.insert(format!("{group}/{track}"), list.len());
    }
    for lane in lanes {
        let group = format!("lane {lane}");
        assert!(
            counts.keys().any(|k| k.starts_with(&format!("{group}/host"))),
            "no host track for {group}: {counts:?}"
        );
        assert!(counts.contains_key(&format!("{group}/GPU")), "no GPU track for {group}: {counts:?}");
    }
    counts
}
