package ui

import (
	"fmt"
	"html/template"
	"strings"
)

// chartSeries is one line of a chart; Class styles it.
type chartSeries struct {
	Class  string
	Values []float64
}

// lineChart draws series as an inline SVG of the given size, scaled to
// their largest value (or to limit, when it is larger), with a dashed
// line at limit when limit ≥ 0. Only numbers and fixed class names go
// into the markup.
func lineChart(width, height int, series []chartSeries, limit float64) template.HTML {
	top := limit
	n := 0
	for _, s := range series {
		n = max(n, len(s.Values))
		for _, v := range s.Values {
			top = max(top, v)
		}
	}
	if top <= 0 {
		top = 1
	}
	top *= 1.1
	x := func(i int) float64 {
		if n <= 1 {
			return 0
		}
		return float64(i) * float64(width) / float64(n-1)
	}
	y := func(v float64) float64 { return float64(height) - v/top*float64(height) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="chart">`, width, height, width, height)
	for _, s := range series {
		fmt.Fprintf(&b, `<polyline class="%s" fill="none" points="`, s.Class)
		for i, v := range s.Values {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(i), y(v))
		}
		b.WriteString(`"/>`)
	}
	if limit >= 0 {
		fmt.Fprintf(&b, `<line class="limit" x1="0" x2="%d" y1="%.1f" y2="%.1f"/>`, width, y(limit), y(limit))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // #nosec: numbers and constant class names only
}
