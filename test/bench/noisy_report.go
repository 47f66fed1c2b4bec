package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// writeReport prints the tables and writes them to bin/bench-noisy.md (or --out when given).
func (n *noisyRun) writeReport() error {
	b := n.b
	var s strings.Builder
	fmt.Fprintf(&s, "%d victim namespaces, one KCLArtifact each (3 ConfigMaps, spec.timeout %s); per victim, the time "+
		"from its argument's change until it is Ready at the new generation with a new artifact. Noisy: one tenant "+
		"runs %s, all at once, dealt out in turn over %s namespaces (one run each, in order).\n\n", len(n.victims),
		fmtDur(victimTimeout), n.groupsString(), spreadsString(n.attacks))
	s.WriteString(n.victimTable())
	for _, a := range n.attacks {
		fmt.Fprintf(&s, "\n### The attack over %d namespace(s): %s\n\n", a.spread, strings.Join(a.namespaces, ", "))
		s.WriteString(n.attackTable(a))
		s.WriteString("\n" + n.bigTable(a))
		if t := n.metricsTable(a); t != "" {
			s.WriteString("\n" + t)
		}
	}
	s.WriteString("\nDetails (deltas over each round's measured span):\n\n")
	for _, r := range n.rounds {
		fmt.Fprintf(&s, "- %s\n", r.detail)
	}
	s.WriteString("\n" + n.describe() + "\n" + b.controllerLogSummary())
	fmt.Print("\n" + s.String())
	out := filepath.Join(b.root, "bin", "bench-noisy.md")
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "out" {
			out = b.cfg.out
		}
	})
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte("# make bench-noisy\n\n"+s.String()), 0o644); err != nil {
		return err
	}
	logf("bench-noisy: table written to %s", out)
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// latency shows a round's latency, saying when it is a victim not served in time.
func (n *noisyRun) latency(r *noisyRound, d time.Duration) string {
	if r.unserved > 0 && d >= n.b.cfg.timeout {
		return "≥ " + fmtDur(d) + " (not served)"
	}
	return fmtDur(d)
}

func spreadsString(as []*attackRun) string {
	var parts []string
	for _, a := range as {
		parts = append(parts, fmt.Sprint(a.spread))
	}
	return strings.Join(parts, ", then ")
}

// victimTable has a column for the quiet round and one per attack.
func (n *noisyRun) victimTable() string {
	q := n.rounds[0]
	goal := 2*q.p95 + victimTimeout
	header := []string{"victims", "quiet"}
	for _, a := range n.attacks {
		header = append(header, fmt.Sprintf("attack over %d ns", a.spread))
	}
	header = append(header, "goal", "result")
	hwm := func(r *noisyRound) string {
		s := fmt.Sprintf("%.0f", mb(r.ctrlHWM))
		if !r.hwmReset {
			s += " (since start)"
		}
		return s
	}
	row := func(title string, quiet string, per func(a *attackRun) string, goal string, ok func(a *attackRun) bool) []string {
		r := []string{title, quiet}
		pass := true
		for _, a := range n.attacks {
			r = append(r, per(a))
			pass = pass && (ok == nil || ok(a))
		}
		result := ""
		if ok != nil {
			result = verdict(pass)
		}
		return append(r, goal, result)
	}
	rows := [][]string{
		row("victim latency p50", n.latency(q, q.p50), func(a *attackRun) string { return n.latency(a.round, a.round.p50) }, "", nil),
		row("victim latency p95", n.latency(q, q.p95), func(a *attackRun) string { return n.latency(a.round, a.round.p95) },
			"≤ 2 × quiet p95 + "+fmtDur(victimTimeout)+" = "+fmtDur(goal), func(a *attackRun) bool { return a.round.p95 <= goal }),
		row("victim latency max", n.latency(q, q.max), func(a *attackRun) string { return n.latency(a.round, a.round.max) }, "", nil),
		row("victims not served within "+fmtDur(n.b.cfg.timeout), fmt.Sprintf("%d/%d", q.unserved, len(n.victims)),
			func(a *attackRun) string { return fmt.Sprintf("%d/%d", a.round.unserved, len(n.victims)) }, "", nil),
		row("p95 noisy / quiet", "", func(a *attackRun) string {
			if q.p95 == 0 {
				return "—"
			}
			return fmt.Sprintf("%.1f×", float64(a.round.p95)/float64(q.p95))
		}, "", nil),
		row("controller peak RSS (MB, VmHWM, the controller alone)", hwm(q), func(a *attackRun) string { return hwm(a.round) },
			fmt.Sprintf("≤ %d", rssGoal>>20), func(a *attackRun) bool { return max(q.ctrlHWM, a.round.ctrlHWM) <= rssGoal }),
		row("controller peak RSS from the attacker's creation to C's convergence (MB)", "",
			func(a *attackRun) string { return fmt.Sprintf("%.0f", mb(a.attackHWM)) },
			fmt.Sprintf("≤ %d", rssGoal>>20), func(a *attackRun) bool { return a.attackHWM <= rssGoal }),
		row("worker peak RSS (MB)", fmt.Sprintf("%.0f", mb(q.workerPeak)), func(a *attackRun) string { return fmt.Sprintf("%.0f", mb(a.round.workerPeak)) }, "", nil),
		row("controller CPU (s)", fmt.Sprintf("%.1f", q.ctrlCPU.Seconds()), func(a *attackRun) string { return fmt.Sprintf("%.1f", a.round.ctrlCPU.Seconds()) }, "", nil),
		row("worker and fetcher CPU (s)", fmt.Sprintf("%.1f", q.workerCPU.Seconds()), func(a *attackRun) string { return fmt.Sprintf("%.1f", a.round.workerCPU.Seconds()) }, "", nil),
		row("round: first change to last served", fmtDur(q.wall), func(a *attackRun) string { return fmtDur(a.round.wall) }, "", nil),
		row("span of CPU and peaks", fmtDur(q.measured), func(a *attackRun) string { return fmtDur(a.round.measured) + " (from the attacker's creation)" }, "", nil),
	}
	return markdownTable(header, rows)
}

// attackTable says what became of each attack group at the end of the run.
func (n *noisyRun) attackTable(a *attackRun) string {
	var rows [][]string
	var examples []string
	for _, g := range n.groups {
		s := a.final[g.id]
		rows = append(rows, []string{g.id + ": " + g.title, fmt.Sprint(g.n), countsString(s.states),
			fmt.Sprintf("%d/%d", s.published, g.n), n.attackNote(a, g.id)})
		if s.example != "" {
			examples = append(examples, fmt.Sprintf("- %s, e.g.: %s", g.id, s.example))
		}
	}
	t := markdownTable([]string{"attacker group", "objects", "Ready at the end", "published an artifact", "notes"}, rows)
	if len(examples) > 0 {
		t += "\nA Ready=False message of each group:\n\n" + strings.Join(examples, "\n") + "\n"
	}
	return t
}

func (n *noisyRun) attackNote(a *attackRun, id string) string {
	switch id {
	case "A":
		return fmt.Sprintf("drip server: %d requests, %d bytes sent", n.drip.requests.Load(), n.drip.written.Load())
	case "C":
		latest := 0
		for _, c := range a.bigChecks {
			if c.ok() {
				latest++
			}
		}
		conv := "not converged within " + fmtDur(n.convergeBound())
		if a.converged >= 0 {
			conv = "converged " + fmtDur(a.converged) + " after the last change"
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return fmt.Sprintf("%d/%d publish their latest argument, complete (%s); %d argument changes", latest, len(a.bigChecks), conv, a.changes)
	}
	return ""
}

// bigTable is C's check: each object's last published artifact against its latest argument.
func (n *noisyRun) bigTable(a *attackRun) string {
	var rows [][]string
	for _, c := range a.bigChecks {
		result := "latest, complete"
		switch {
		case !c.hasArtifact:
			result = "nothing published"
		case c.problem != "":
			result = c.problem
		case c.published != c.latest:
			result = "not the latest"
		}
		rows = append(rows, []string{c.name, c.latest, orNone(c.published), fmt.Sprintf("%.1f", float64(c.bytes)/1e6), c.ready, result})
	}
	return "C at the end: the artifact each object publishes, read back (digest checked):\n\n" +
		markdownTable([]string{"object", "latest argument", "published argument", "YAML (MB)", "Ready", "result"}, rows)
}

// metricsTable summarizes the controller's metrics with a namespace label whose name says
// queue_wait or render, over the noisy round: the attacker's namespace against the victims'
// mean. Empty when the controller has none.
func (n *noisyRun) metricsTable(a *attackRun) string {
	z := a.round
	start, end := z.startMark.metrics, z.endMark.metrics
	victims := make([]string, len(n.victims))
	for i, v := range n.victims {
		victims[i] = v.key.Namespace
	}
	var rows [][]string
	for _, base := range namespaceMetricNames(end) {
		if _, hist := end[base+"_count"]; hist {
			rows = append(rows, histogramRow(base, start, end, a.namespaces, victims))
		} else {
			rows = append(rows, valueRow(base, start, end, a.namespaces, victims))
		}
	}
	if len(rows) == 0 {
		return ""
	}
	return "Per-namespace metrics over the noisy round (histograms: observations and mean; counters: increase):\n\n" +
		markdownTable([]string{"metric", "attacker's namespaces (all)", "victims' mean per namespace"}, rows)
}

// namespaceMetricNames lists the metrics (a histogram by its base name) that have a namespace
// label and whose name contains queue_wait or render.
func namespaceMetricNames(s scrape) []string {
	seen := map[string]bool{}
	for name, ss := range s {
		if !strings.Contains(name, "queue_wait") && !strings.Contains(name, "render") {
			continue
		}
		if !slices.ContainsFunc(ss, func(x series) bool { _, ok := x.labels["namespace"]; return ok }) {
			continue
		}
		base := name
		for _, suffix := range []string{"_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok {
				if _, hist := s[b+"_count"]; hist {
					if _, hist = s[b+"_sum"]; hist {
						base = b
					}
				}
			}
		}
		seen[base] = true
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func histogramRow(base string, start, end scrape, attackers, victims []string) []string {
	stats := func(nss ...string) (count, sum float64) {
		for _, ns := range nss {
			c, _ := delta(start, end, base+"_count", map[string]string{"namespace": ns})
			s, _ := delta(start, end, base+"_sum", map[string]string{"namespace": ns})
			count, sum = count+c, sum+s
		}
		return count, sum
	}
	show := func(count, sum, per float64) string {
		if count == 0 {
			return "0 observations"
		}
		return fmt.Sprintf("%.1f observations, mean %s", count/per, fmtDur(time.Duration(sum/count*float64(time.Second))))
	}
	nc, ns := stats(attackers...)
	vc, vs := stats(victims...)
	return []string{base, show(nc, ns, 1), show(vc, vs, float64(len(victims)))}
}

// valueRow is a counter's increase (name ending in _total) or a gauge's value at the end.
func valueRow(name string, start, end scrape, attackers, victims []string) []string {
	value := func(ns string) float64 {
		match := map[string]string{"namespace": ns}
		if strings.HasSuffix(name, "_total") {
			v, _ := delta(start, end, name, match)
			return v
		}
		v, _ := end.sum(name, match)
		return v
	}
	var sum, attack float64
	for _, ns := range victims {
		sum += value(ns)
	}
	for _, ns := range attackers {
		attack += value(ns)
	}
	return []string{name, fmt.Sprintf("%.0f", attack), fmt.Sprintf("%.1f", sum/float64(len(victims)))}
}

func (n *noisyRun) describe() string {
	b := n.b
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%s, kernel %s, %d CPUs; controller args: fluxenv's, then %s; controller env %s; --kcl-workers %d; "+
		"harness commit %s; binary %s; victims' spec.timeout %s; attacker warm-up %s before the noisy round; round "+
		"timeout (--timeout) %s; %s.\n",
		b.goVersion, strings.TrimSpace(string(kernel)), b.cpus, strings.Join(b.cfg.controllerArgs, " "), strings.Join(b.cfg.controllerEnv, " "),
		b.cfg.workers, b.commit, b.binaryInfo, fmtDur(victimTimeout), fmtDur(noisyWarmup), fmtDur(b.cfg.timeout),
		time.Now().Format("2006-01-02 15:04 MST"))
}
