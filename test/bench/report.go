package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// phaseResult is one row of the table.
type phaseResult struct {
	pass, phase string
	n           int

	wall           time.Duration
	floor          time.Duration
	floorEstimated bool // the renders metric is missing: the floor assumes the expected renders

	renders   float64
	rendersOK bool

	ctrlCPU   time.Duration
	workerCPU time.Duration

	workerStarts   float64
	workerStartsOK bool

	apiRequests, reconciles float64
	apiOK                   bool

	ctrlHWM, workerPeak uint64 // bytes
	// the highest RssAnon of one worker, and of all workers together at one poll (bytes)
	workerAnon, workersAnon uint64
	workersSeen             int

	detail string // the other metrics of the phase, one line
}

func (r phaseResult) row() []string {
	na := "n/a"
	floor, ratio := "—", "—"
	if r.floor > 0 {
		floor = fmtDur(r.floor)
		if r.floorEstimated {
			floor = "~" + floor
		}
		ratio = fmt.Sprintf("%.1f×", float64(r.wall)/float64(r.floor))
	}
	renders, starts, api := na, na, na
	if r.rendersOK {
		renders = fmt.Sprintf("%.0f", r.renders)
	}
	if r.workerStartsOK {
		starts = fmt.Sprintf("%.0f", r.workerStarts)
	} else if r.workersSeen > 0 {
		// the processes seen by sampling: short-lived ones may be missed
		starts = fmt.Sprintf("n/a (≥%d seen)", r.workersSeen)
	}
	if r.apiOK && r.reconciles > 0 {
		api = fmt.Sprintf("%.2f", r.apiRequests/r.reconciles)
	} else if r.apiOK {
		api = fmt.Sprintf("%.0f req / 0 reconciles", r.apiRequests)
	}
	cpuPerObj := float64(r.ctrlCPU) / float64(time.Millisecond) / float64(max(r.n, 1))
	return []string{
		r.pass + " / " + r.phase,
		fmt.Sprint(r.n),
		fmtDur(r.wall),
		floor,
		ratio,
		fmt.Sprintf("%.2f", cpuPerObj),
		fmt.Sprintf("%.2f", r.workerCPU.Seconds()),
		starts,
		renders,
		api,
		fmt.Sprintf("%.0f", mb(r.ctrlHWM)),
		fmt.Sprintf("%.0f", mb(r.workerPeak)),
		fmt.Sprintf("%.0f", mb(r.workerAnon)),
	}
}

var header = []string{"pass / phase", "N", "wall", "floor", "wall/floor", "ctrl CPU/obj (ms)",
	"worker CPU total (s)", "worker starts", "renders", "API req/reconcile", "ctrl peak RSS (MB)",
	"worker peak RSS (MB)", "worker peak anon (MB)"}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	}
}

// markdownTable renders rows under header, columns padded for reading in a terminal too.
func markdownTable(header []string, rows [][]string) string { return table(header, rows, true, 1) }

// docsTable renders rows under header as the tables of docs/ are written, to be pasted there:
// unpadded, the first left columns aligned left, the others right.
func docsTable(header []string, rows [][]string, left int) string {
	return table(header, rows, false, left)
}

func table(header []string, rows [][]string, pad bool, left int) string {
	width := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if pad {
				width[i] = max(width[i], len([]rune(c)))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			fill := strings.Repeat(" ", max(width[i]-len([]rune(c)), 0))
			if i < left {
				c += fill
			} else {
				c = fill + c
			}
			if c != "" {
				c = " " + c
			}
			b.WriteString(c + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	b.WriteString("|")
	for i, w := range width {
		dashes, align := w, ""
		if i >= left {
			dashes, align = w-1, ":"
		}
		if !pad {
			dashes = 3
		}
		b.WriteString(" " + strings.Repeat("-", dashes) + align + " |")
	}
	b.WriteString("\n")
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

// report is the table, the line describing the run, and the details of each phase.
func (b *bench) report() string {
	var rows [][]string
	for _, r := range b.results {
		rows = append(rows, r.row())
	}
	var s strings.Builder
	s.WriteString(markdownTable(header, rows))
	s.WriteString("\n")
	s.WriteString(b.describeRun())
	s.WriteString("\n")
	return s.String()
}

func (b *bench) details() string {
	var s strings.Builder
	s.WriteString("Details per phase (deltas over the phase; CPU in seconds):\n\n")
	for _, r := range b.results {
		fmt.Fprintf(&s, "- %s / %s: %s\n", r.pass, r.phase, r.detail)
	}
	return s.String()
}

func (b *bench) describeRun() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	args := b.cfg.controllerArgsRaw
	if strings.TrimSpace(args) == "" {
		args = "(none: defaults, sandbox on)"
	}
	if len(b.cfg.controllerEnv) > 0 {
		args += "; environment: " + strings.Join(b.cfg.controllerEnv, " ")
	}
	order, sharded := "namespace by namespace", ""
	if b.cfg.roundRobin {
		order = "one namespace after the other in turn"
	}
	if b.cfg.shards > 1 {
		sharded = " (sharded by --watch-label-selector; CPU and requests summed over them, peak RSS the highest)"
	}
	objects := fmt.Sprintf("%d KCLArtifacts over %d namespaces per pass, created %s", b.cfg.n, b.cfg.namespaces, order)
	if b.cfg.compare {
		objects = fmt.Sprintf("%d applications over %d namespaces per pipeline, shapes %s", b.cfg.n, b.cfg.namespaces,
			strings.Join(b.cfg.shapes, ", "))
	}
	return fmt.Sprintf("%s, kernel %s, %d CPUs; controller args: %s; --kcl-workers %d; commit %s; binary %s; "+
		"warm render %s (median of %d sandboxed renders after %d warm-ups); floor = renders × warm render ÷ workers; "+
		"%s; %d controller process(es)%s; %s.\n",
		b.goVersion, strings.TrimSpace(string(kernel)), b.cpus, args, b.cfg.workers, b.commit, b.binaryInfo,
		fmtDur3(b.warm), b.cfg.floorRuns, b.cfg.floorWarmups, objects, b.cfg.shards, sharded,
		time.Now().Format("2006-01-02 15:04 MST"))
}

func fmtDur3(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
