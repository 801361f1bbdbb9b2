//! What a soak's results.jsonl says: a Markdown summary with each resource's slope, and the
//! figure of four panels by minute.

use std::path::Path;

use plotters::prelude::{
    ChartBuilder, Color, IntoDrawingArea, LineSeries, PathElement, RGBColor, SVGBackend,
    SeriesLabelPosition, BLACK, WHITE,
};
use serde_json::{json, Value};

/// The least-squares slope of `pts` (per unit of x), `None` under two points.
fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The median of `v` (sorted here).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Print a Markdown table of minutes 1, 15, 30, 45 and the last, and each resource's slope per
/// minute over the first and the second half of the run (a resource that only grows while the
/// store warms up flattens in the second half; one that grows without bound does not).
pub(crate) fn summarize(results: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let all: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let lines: Vec<&Value> = all.iter().filter(|v| v.get("minute").is_some()).collect();
    let last = lines.len();
    if last == 0 {
        return Err("no minute lines".into());
    }
    let mib = |v: &Value| v.as_f64().map(|b| b / 1024.0 / 1024.0);
    println!("| minute | req/s | errors | p50 ms | p99 ms | RSS MiB | open files | tasks | task MiB | data dir MiB | adverts | load (1 min) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut shown: Vec<usize> = [1, 15, 30, 45, last]
        .into_iter()
        .filter(|m| *m <= last)
        .collect();
    shown.dedup();
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    // The node's own columns, the same in a minute's row and an idle one.
    let node_cells = |v: &Value| {
        format!(
            "{} | {} | {} | {} | {} | {} | {}",
            f(&json!(v["node"]["rss_kib"].as_f64().map(|k| k / 1024.0))),
            v["node"]["fds"],
            v["status"]["tasks"],
            f(&json!(mib(&v["status"]["task_bytes"]))),
            f(&json!(mib(&v["node"]["data_dir_bytes"]))),
            v["status"]["adverts"],
            f(&v["node"]["loadavg"][0]),
        )
    };
    for m in shown {
        let v = lines[m - 1];
        println!(
            "| {m} | {} | {} | {} | {} | {} |",
            f(&v["req_per_s"]),
            v["errors"],
            f(&v["p50_ms"]),
            f(&v["p99_ms"]),
            node_cells(v),
        );
    }
    for v in all.iter().filter(|v| v.get("after_minute").is_some()) {
        println!("| idle {} | | | | | {} |", v["after_minute"], node_cells(v));
    }
    let half = last / 2;
    type Get = fn(&Value) -> Option<f64>;
    let measures: [(&str, Get); 7] = [
        ("RSS, MiB", |v| {
            Some(v["node"]["rss_kib"].as_f64()? / 1024.0)
        }),
        ("open files", |v| v["node"]["fds"].as_f64()),
        ("threads", |v| v["node"]["threads"].as_f64()),
        ("tasks", |v| v["status"]["tasks"].as_f64()),
        ("data dir, MiB", |v| {
            Some(v["node"]["data_dir_bytes"].as_f64()? / 1024.0 / 1024.0)
        }),
        ("adverts", |v| v["status"]["adverts"].as_f64()),
        ("p99, ms", |v| v["p99_ms"].as_f64()),
    ];
    println!();
    println!("| measure | slope per minute, minutes 1-{half} | slope per minute, minutes {}-{last} | median, first half | median, second half |", half + 1);
    println!("|---|---|---|---|---|");
    for (name, get) in measures {
        let pts = |r: &[&Value]| -> Vec<(f64, f64)> {
            r.iter()
                .filter_map(|v| Some((v["minute"].as_f64()?, get(v)?)))
                .collect()
        };
        let (a, b) = (pts(&lines[..half]), pts(&lines[half..]));
        let s = |p: &[(f64, f64)]| slope(p).map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} |",
            s(&a),
            s(&b),
            median(a.iter().map(|p| p.1).collect()),
            median(b.iter().map(|p| p.1).collect()),
        );
    }
    Ok(())
}

/// The figure of a results.jsonl: four panels by minute (RSS, open files, the task store,
/// latency).
pub(crate) fn plot_file(results: &Path, svg: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("minute").is_some())
        .collect();
    let panels = panels(&lines);
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", svg.display());
    let root = SVGBackend::new(svg, (900, 1100)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (area, (title, unit, ss)) in root.split_evenly((4, 1)).iter().zip(&panels) {
        let x_max = ss
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let y_max = ss
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .fold(1e-9f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(*title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("minute")
            .y_desc(*unit)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, pts)) in ss.iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

/// A panel of the figure: its title, its unit and its (label, points) series.
type Panel = (
    &'static str,
    &'static str,
    Vec<(&'static str, Vec<(f64, f64)>)>,
);

/// The four panels of the figure from the minute lines: RSS, open files, the task store,
/// latency.
fn panels(lines: &[Value]) -> Vec<Panel> {
    let series = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        lines
            .iter()
            .filter_map(|v| Some((v["minute"].as_f64()?, f(v)?)))
            .collect()
    };
    let mib = 1024.0 * 1024.0;
    vec![
        (
            "node RSS",
            "MiB",
            vec![(
                "RSS",
                series(&|v| Some(v["node"]["rss_kib"].as_f64()? / 1024.0)),
            )],
        ),
        (
            "open files",
            "fds",
            vec![("open files", series(&|v| v["node"]["fds"].as_f64()))],
        ),
        (
            "task store",
            "thousands / MiB",
            vec![
                (
                    "tasks (thousands)",
                    series(&|v| Some(v["status"]["tasks"].as_f64()? / 1000.0)),
                ),
                (
                    "data dir (MiB)",
                    series(&|v| Some(v["node"]["data_dir_bytes"].as_f64()? / mib)),
                ),
                ("adverts", series(&|v| v["status"]["adverts"].as_f64())),
            ],
        ),
        (
            "latency",
            "ms",
            vec![
                ("p99", series(&|v| v["p99_ms"].as_f64())),
                ("p50", series(&|v| v["p50_ms"].as_f64())),
            ],
        ),
    ]
}
