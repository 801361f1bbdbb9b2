//! The SVG figures `simulate --out DIR` writes, drawn with plotters' SVG backend (text as SVG
//! `<text>`, so no font files are needed).

use std::path::Path;

use plotters::prelude::{
    ChartBuilder, Color, IntoDrawingArea, LineSeries, PathElement, RGBColor, SVGBackend,
    SeriesLabelPosition, BLACK, WHITE,
};

/// One line of a figure.
pub struct Series {
    /// Its name in the legend (none when empty).
    pub label: String,
    /// Its (x, y) points, in order.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A line chart of `series` into `path`; the axes span the data (from 0).
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let max = |f: fn(&(f64, f64)) -> f64| {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(f))
            .fold(0.0f64, f64::max)
    };
    let (x_max, y_max) = (max(|p| p.0).max(1e-9) * 1.02, max(|p| p.1).max(1e-9) * 1.05);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    if series.len() > 1 || series.first().is_some_and(|s| !s.label.is_empty()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_an_svg_with_its_title_axes_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        lines(
            &p,
            "reach CDF",
            "ms",
            "share",
            &[Series {
                label: "run".into(),
                points: vec![(0.0, 0.0), (10.0, 0.5), (20.0, 1.0)],
            }],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        // plotters writes each text on a line of its own inside its element.
        for want in [
            "reach CDF",
            ">\nms\n<",
            ">\nshare\n<",
            "<polyline",
            ">\nrun\n<",
        ] {
            assert!(svg.contains(want), "no {want:?} in the figure: {svg}");
        }
    }
}
