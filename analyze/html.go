package analyze

import (
	"bufio"
	_ "embed"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

//go:embed report.html.tmpl
var pageTemplate string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp":    stamp,
	"pct":      pct,
	"orNone":   orNone,
	"limits":   limitRange,
	"ms":       func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"sum":      sum,
	"count":    func(m map[string]int64, k string) int64 { return m[k] },
	"keys":     sortedKeys[map[string]int64],
	"tiers":    sortedTiers[map[string]int64],
	"changes":  changeList,
	"counts":   countList,
	"laneName": laneLabel,
	"rates": func(caption, what string, rates []Rate) rateTable {
		return rateTable{Caption: caption, What: what, Rates: rates}
	},
}).Parse(pageTemplate))

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 760.0, 150.0
	padL, padR     = 48.0, 12.0
	padT, padB     = 10.0, 28.0
)

// chart is one SVG line chart, ready for the template.
type chart struct {
	ID, Title, Desc string
	Lines           []chartLine
	YTicks, XTicks  []tick
	W, H            float64
	Left, Right     float64 // plot area, x
	Top, Bottom     float64 // plot area, y
}

type chartLine struct {
	Name, Class, Points string
}

type tick struct {
	Pos   float64
	Label string
}

// rateTable is one table of refusal rates.
type rateTable struct {
	Caption, What string
	Rates         []Rate
}

// pageData is what the template renders.
type pageData struct {
	R         *Report
	Layout    *layout // r.Policy's
	Event     string  // the policy's event
	RouteKey  string  // the log key of the route's name
	LimitNote template.HTML
	Generated string
	Decisions []string
	InFlight  []chart
	Refusals  chart
	LanePeaks []LanePeak
}

// WriteHTML writes r as one self-contained HTML page: the report's tables
// and inline SVG charts of the calls in flight per lane against the limit,
// and of refusals over time, naming things as r.Policy does. It uses no
// scripts and no external assets. It fails only when w does.
func WriteHTML(w io.Writer, r *Report) error {
	lay := newLayout(r.Policy)
	d := pageData{R: r, Layout: lay, Event: lay.event, RouteKey: lay.routeKey, LimitNote: limitNote(lay),
		Generated: time.Now().UTC().Format(time.RFC3339), Decisions: decisionOrder,
		LanePeaks: append(append([]LanePeak(nil), r.Lanes...), r.Users.Top...)}
	tl := r.Timeline
	for i, s := range tl.Series {
		d.InFlight = append(d.InFlight, inFlightChart(fmt.Sprintf("lane-%d", i), tl, s))
	}
	d.Refusals = refusalChart(tl)
	bw := bufio.NewWriter(w)
	if err := page.Execute(bw, d); err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	return nil
}

// limitNote says, for the in-flight charts, which limit a lane with a
// reserve records for which calls: its class's calls see the whole limit,
// the others the limit less the reserve (the built-in policy: "a single-row match gets
// the cluster limit, other calls the bulk limit"). "" when no lane has a
// reserve.
func limitNote(lay *layout) template.HTML {
	var notes []string
	n := 0
	for _, l := range lay.lanes {
		if l.Reserve != nil {
			n++
		}
	}
	for _, l := range lay.lanes {
		if l.Reserve == nil {
			continue
		}
		c := lay.p.Class(l.Reserve.Class)
		if c == nil || c.Name == "" {
			continue
		}
		what := strings.ReplaceAll(c.Name, "_", "-")
		article := "a"
		if strings.ContainsRune("aeiou", rune(what[0])) {
			article = "an"
		}
		var routes []string
		for _, name := range c.Routes {
			if r := lay.p.Route(name); r != nil {
				routes = append(routes, "<code>"+html.EscapeString(r.LogName)+"</code>")
			}
		}
		s := fmt.Sprintf("%s %s %s gets the %s limit, other calls the bulk limit",
			article, html.EscapeString(what), strings.Join(routes, " or "), l.Scope)
		if n > 1 {
			s = "in lane " + html.EscapeString(l.Name) + ", " + s
		}
		notes = append(notes, s)
	}
	return template.HTML(strings.Join(notes, "; ")) // built from escaped names
}

func laneLabel(p LanePeak) string {
	if p.ID == "" {
		return p.Lane
	}
	return p.Lane + ":" + p.ID
}

func newChart(id, title string, tl Timeline, yMax int64) chart {
	c := chart{ID: id, Title: title, W: chartW, H: chartH, Left: padL, Right: chartW - padR,
		Top: padT, Bottom: chartH - padB}
	yMax = max(yMax, 1)
	step := niceStep(yMax)
	for v := int64(0); v <= yMax; v += step {
		c.YTicks = append(c.YTicks, tick{Pos: c.y(float64(v), yMax), Label: strconv.FormatInt(v, 10)})
	}
	n := len(tl.ShadowRefused)
	for _, f := range []float64{0, 0.5, 1} {
		at := tl.Start.Add(time.Duration(f*float64(n)*float64(tl.BucketMS)) * time.Millisecond)
		c.XTicks = append(c.XTicks, tick{Pos: c.Left + f*(c.Right-c.Left), Label: at.UTC().Format("01-02 15:04:05")})
	}
	return c
}

func (c chart) y(v float64, yMax int64) float64 {
	return math.Round((c.Bottom-v/float64(yMax)*(c.Bottom-c.Top))*10) / 10
}

// steps returns a step polyline of vals (one per bucket); negative values
// break nothing, they are drawn at 0.
func (c chart) steps(vals []float64, yMax int64) string {
	var b strings.Builder
	n := len(vals)
	if n == 0 {
		return ""
	}
	dx := (c.Right - c.Left) / float64(n)
	for i, v := range vals {
		y := c.y(max(v, 0), yMax)
		x0, x1 := c.Left+float64(i)*dx, c.Left+float64(i+1)*dx
		fmt.Fprintf(&b, "%.1f,%.1f %.1f,%.1f ", x0, y, x1, y)
	}
	return strings.TrimSpace(b.String())
}

// niceStep returns the smallest step of 1, 2 or 5 × 10^k that gives at
// most five ticks above 0 up to maxV.
func niceStep(maxV int64) int64 {
	for base := int64(1); ; base *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if maxV/(base*m) <= 5 {
				return base * m
			}
		}
	}
}

func inFlightChart(id string, tl Timeline, s Series) chart {
	var yMax int64
	peak, peakAt, limit, over := 0, 0, -1, 0
	in := make([]float64, len(s.InFlight))
	lim := make([]float64, len(s.Limit))
	for i, v := range s.InFlight {
		in[i] = float64(v)
		yMax = max(yMax, int64(v))
		if v > peak {
			peak, peakAt = v, i
		}
	}
	for i, v := range s.Limit {
		lim[i] = float64(v)
		yMax = max(yMax, int64(v))
		if v >= 0 {
			limit = v
		}
		if v >= 0 && i < len(s.InFlight) && s.InFlight[i] > v {
			over++
		}
	}
	c := newChart(id, "Calls in flight: "+s.Name, tl, yMax)
	c.Lines = []chartLine{{Name: "calls in flight", Class: "inflight", Points: c.steps(in, yMax)}}
	if limit >= 0 {
		c.Lines = append(c.Lines, chartLine{Name: "limit", Class: "limit", Points: c.steps(lim, yMax)})
	}
	at := tl.Start.Add(time.Duration(int64(peakAt)*tl.BucketMS) * time.Millisecond)
	c.Desc = fmt.Sprintf("Most calls in flight in lane %s per %s interval, rebuilt from the calls' intervals. "+
		"Peak %d at %s; last limit recorded %s; above the limit in %d of %d intervals.",
		s.Name, time.Duration(tl.BucketMS)*time.Millisecond, peak, stamp(at), limitText(limit), over, len(s.InFlight))
	return c
}

func limitText(l int) string {
	if l < 0 {
		return "none"
	}
	return strconv.Itoa(l)
}

func refusalChart(tl Timeline) chart {
	var yMax, shadow, refused, whatIf int64
	for i := range tl.ShadowRefused {
		yMax = max(yMax, tl.ShadowRefused[i], tl.Refused[i])
		shadow += tl.ShadowRefused[i]
		refused += tl.Refused[i]
		if tl.WhatIfRefused != nil {
			yMax = max(yMax, tl.WhatIfRefused[i])
			whatIf += tl.WhatIfRefused[i]
		}
	}
	c := newChart("refusals", "Refusals over time", tl, yMax)
	toF := func(v []int64) []float64 {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return f
	}
	c.Lines = []chartLine{
		{Name: "shadow-refused (logged)", Class: "shadow", Points: c.steps(toF(tl.ShadowRefused), yMax)},
		{Name: "refused (logged)", Class: "refused", Points: c.steps(toF(tl.Refused), yMax)},
	}
	c.Desc = fmt.Sprintf("Calls refused per %s interval, by when they started: %d shadow-refused and %d refused in the log",
		time.Duration(tl.BucketMS)*time.Millisecond, shadow, refused)
	if tl.WhatIfRefused != nil {
		c.Lines = append(c.Lines, chartLine{Name: "refused (what-if)", Class: "whatif", Points: c.steps(toF(tl.WhatIfRefused), yMax)})
		c.Desc += fmt.Sprintf("; %d the what-if config would refuse", whatIf)
	}
	c.Desc += "."
	return c
}
