package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// printer writes results in one format.
type printer interface {
	start(cfg string)
	comment(line string)
	row(r Result)
}

// printers writes to each of several printers.
type printers []printer

func (ps printers) start(cfg string) {
	for _, p := range ps {
		p.start(cfg)
	}
}

func (ps printers) comment(line string) {
	for _, p := range ps {
		p.comment(line)
	}
}

func (ps printers) row(r Result) {
	for _, p := range ps {
		p.row(r)
	}
}

// tsvPrinter writes metric<TAB>goffload<TAB>baseline<TAB>ratio lines, times
// in nanoseconds per operation.
type tsvPrinter struct{ w io.Writer }

func (p tsvPrinter) start(cfg string) {
	fmt.Fprintf(p.w, "# goffload bench: %s\n", cfg)
	fmt.Fprintf(p.w, "# times in nanoseconds per operation (median of rounds); ratio = goffload / baseline, lower is better; - where no baseline applies\n")
	fmt.Fprintf(p.w, "# metric\tgoffload_ns\tbaseline_ns\tratio\n")
}

func (p tsvPrinter) comment(line string) { fmt.Fprintf(p.w, "# %s\n", line) }

func (p tsvPrinter) row(r Result) {
	base, ratio := "-", "-"
	if r.HasBaseline() {
		base = strconv.FormatFloat(r.Baseline, 'f', 1, 64)
		if q := r.Ratio(); !math.IsNaN(q) {
			ratio = strconv.FormatFloat(q, 'f', 3, 64)
			if q > 0 && q < 0.001 { // a baseline slowed by a busy machine: not 0.000
				ratio = strconv.FormatFloat(q, 'g', 3, 64)
			}
		}
	}
	fmt.Fprintf(p.w, "%s\t%s\t%s\t%s\n", r.Metric, strconv.FormatFloat(r.Goffload, 'f', 1, 64), base, ratio)
}

// tablePrinter writes an aligned table with units. Its columns have fixed
// widths so that rows can be printed as they are measured.
type tablePrinter struct {
	w      io.Writer
	header bool
}

const tableRow = "%-36s %12s %12s %8s  %s\n"

func (p *tablePrinter) start(cfg string) {
	fmt.Fprintf(p.w, "goffload bench: %s\n", cfg)
	fmt.Fprintf(p.w, "times per operation, median of rounds; ratio = goffload / baseline (lower is better)\n")
}

func (p *tablePrinter) comment(line string) {
	if p.header {
		fmt.Fprintln(p.w)
		p.header = false
	}
	fmt.Fprintln(p.w, line)
}

func (p *tablePrinter) row(r Result) {
	if !p.header {
		fmt.Fprintln(p.w)
		fmt.Fprintln(p.w, strings.TrimRight(fmt.Sprintf(tableRow, "metric", "goffload", "baseline", "ratio", "notes"), " \n"))
		p.header = true
	}
	base, ratio := humanCells(r)
	line := fmt.Sprintf(tableRow, r.Metric, human(r.Goffload), base, ratio, r.Note)
	fmt.Fprintln(p.w, strings.TrimRight(line, " \n"))
}

// mdPrinter writes markdown: the run's comments as a list, and the rows
// that follow them as a table with units, for the README.
type mdPrinter struct {
	w     io.Writer
	table bool // a table is open
}

func (p *mdPrinter) start(cfg string) {
	fmt.Fprintf(p.w, "goffload bench: %s. Times per operation, median of rounds; ratio = goffload ÷ baseline (lower is better).\n\n", mdEscape(cfg))
}

func (p *mdPrinter) comment(line string) {
	if p.table {
		fmt.Fprintln(p.w)
		p.table = false
	}
	fmt.Fprintf(p.w, "- %s\n", mdEscape(line))
}

func (p *mdPrinter) row(r Result) {
	if !p.table {
		fmt.Fprint(p.w, "\n| metric | goffload | baseline | ratio | notes |\n|---|---:|---:|---:|---|\n")
		p.table = true
	}
	base, ratio := humanCells(r)
	fmt.Fprintf(p.w, "| `%s` | %s | %s | %s | %s |\n", r.Metric, human(r.Goffload), base, ratio, mdEscape(r.Note))
}

// humanCells returns r's baseline with its unit and its ratio, or "-"
// for what r does not have.
func humanCells(r Result) (base, ratio string) {
	base, ratio = "-", "-"
	if r.HasBaseline() {
		base = human(r.Baseline)
		if q := r.Ratio(); !math.IsNaN(q) {
			ratio = strconv.FormatFloat(q, 'f', 3, 64)
			if q > 0 && q < 0.001 { // a baseline slowed by a busy machine: not 0.000
				ratio = strconv.FormatFloat(q, 'g', 3, 64)
			}
		}
	}
	return base, ratio
}

// mdEscape keeps s from breaking a markdown table or list.
func mdEscape(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}
