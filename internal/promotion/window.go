// Package promotion decides whether a stage may publish an artifact it rendered ahead: the
// upstream's proof of the same inputs, the soak, the windows and the approval.
package promotion

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// maxWindow bounds a window's duration: a window longer than the week its schedule repeats in
// at most is a mistake, and the bound keeps the search for an opening short.
const maxWindow = 7 * 24 * time.Hour

// parser reads cron's five fields and the @descriptors, as Kubernetes CronJobs do.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Window is a parsed spec.promotion.windows entry.
type Window struct {
	schedule cron.Schedule
	duration time.Duration
	loc      *time.Location
}

// ParseWindows parses the windows; the error names the window and what is wrong with it.
func ParseWindows(specs []kclv1.PromotionWindow) ([]Window, error) {
	out := make([]Window, 0, len(specs))
	for i, s := range specs {
		w, err := parseWindow(s)
		if err != nil {
			return nil, fmt.Errorf("spec.promotion.windows[%d] (%q): %w", i, s.Schedule, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func parseWindow(s kclv1.PromotionWindow) (Window, error) {
	if strings.HasPrefix(strings.TrimSpace(s.Schedule), "TZ=") || strings.HasPrefix(strings.TrimSpace(s.Schedule), "CRON_TZ=") {
		return Window{}, fmt.Errorf("the time zone goes in timeZone, not in the schedule")
	}
	sched, err := parser.Parse(s.Schedule)
	if err != nil {
		return Window{}, err
	}
	if s.Duration.Duration <= 0 || s.Duration.Duration > maxWindow {
		return Window{}, fmt.Errorf("duration %s is not between 0 and %s", s.Duration.Duration, maxWindow)
	}
	loc := time.UTC
	if s.TimeZone != "" {
		if loc, err = time.LoadLocation(s.TimeZone); err != nil {
			return Window{}, fmt.Errorf("timeZone: %w", err)
		}
	}
	return Window{schedule: sched, duration: s.Duration.Duration, loc: loc}, nil
}

// openAt tells whether the window is open at now (its schedule fired within the duration
// before), and when it closes or next opens.
func (w Window) openAt(now time.Time) (open bool, closes, opens time.Time) {
	local := now.In(w.loc)
	// cron's Next is strictly after its argument: the last firing at or before now is the first
	// after now-duration, when it is not after now.
	if t := w.schedule.Next(local.Add(-w.duration)); !t.After(local) {
		return true, t.Add(w.duration), time.Time{}
	}
	return false, time.Time{}, w.schedule.Next(local)
}

// WindowsOpen tells whether any window is open at now; closed, opens is when the next one opens.
// No windows is always open.
func WindowsOpen(ws []Window, now time.Time) (open bool, opens time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	for _, w := range ws {
		isOpen, _, next := w.openAt(now)
		if isOpen {
			return true, time.Time{}
		}
		if opens.IsZero() || next.Before(opens) {
			opens = next
		}
	}
	return false, opens
}
