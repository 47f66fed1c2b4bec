package reconcile

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
)

func TestErrorsSayWhatRetryingTakes(t *testing.T) {
	plain := errors.New("connection refused")
	if e := As(plain); e.Reason != meta.FailedReason || !e.Transient || e.Stalled {
		t.Errorf("a plain error: %+v", e)
	}
	wrapped := fmt.Errorf("fetching: %w", Stallf("InvalidPath", "path %q", "../x"))
	if e := As(wrapped); e.Reason != "InvalidPath" || !e.Stalled || e.Error() != `path "../x"` {
		t.Errorf("a wrapped stall: %+v", e)
	}
	if Deferrable(plain) || Deferrable(wrapped) || !Deferrable(Failf("RenderFailed", "boom")) {
		t.Error("only a named failure that is neither transient nor stalled may be gone past")
	}
}
