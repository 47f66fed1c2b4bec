package promotion

import (
	"strings"
	"time"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// Progress is what a closed gate waits for, in few words and as of now, since the controller
// writes a gate's message once: "soak 7m/10m", "outside window, opens 14:00 UTC", "waiting for
// approval"; "" when the gate's own message says it best (the upstream's).
func Progress(p *kclv1.Promotion, g kclv1.GateStatus, now time.Time) string {
	switch {
	case g.Name == kclv1.GateSoak && g.OpensAt != nil && p != nil && p.Soak != nil:
		soak := p.Soak.Duration
		return "soak " + ShortDuration(min(max(soak-g.OpensAt.Sub(now), 0), soak), soak) + "/" + ShortDuration(soak, soak)
	case g.Name == kclv1.GateWindow && g.OpensAt != nil:
		return "outside window, opens " + Clock(g.OpensAt.Time, now)
	case g.Name == kclv1.GateApproval:
		return "waiting for approval"
	}
	return ""
}

// ShortDuration is d as "7m", "1h30m" or "12s": to the minute when the whole is ten minutes or
// more, to the second otherwise.
func ShortDuration(d, whole time.Duration) string {
	if whole >= 10*time.Minute {
		d = d.Truncate(time.Minute)
	}
	s := d.Truncate(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Clock is when t comes: its time of day (UTC) within a day of now, its date beyond.
func Clock(t, now time.Time) string {
	if t.Sub(now) < 24*time.Hour {
		return t.UTC().Format("15:04 UTC")
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}
