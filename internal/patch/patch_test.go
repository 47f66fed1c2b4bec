package patch

import (
	"context"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// noClient fails the test on any request: the patches under test send none.
type noClient struct {
	client.Client
	t *testing.T
}

func (c noClient) Scheme() *runtime.Scheme {
	c.t.Fatal("a status write was being sent")
	return nil
}

func (c noClient) Status() client.SubResourceWriter {
	c.t.Fatal("a status write was sent")
	return nil
}

func (c noClient) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	c.t.Fatal("a metadata patch was sent")
	return nil
}

// Condition messages are rewritten before the status is compared: a message that the filter
// turns back into the one already written is no change, and nothing is sent.
func TestStatusPatcherFiltersConditionMessages(t *testing.T) {
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n", ResourceVersion: "7"},
		Status: kclv1.KCLArtifactStatus{Conditions: []metav1.Condition{
			{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.SucceededReason, Message: "ok"}}}}
	p := NewStatusPatcher(obj, noClient{t: t}, "test", []string{meta.ReadyCondition},
		WithConditionMessages(func(s string) string { return strings.TrimSuffix(s, "\x1b[2J") }))
	obj.Status.Conditions[0].Message = "ok\x1b[2J"
	if err := p.Patch(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	if got := obj.Status.Conditions[0].Message; got != "ok" {
		t.Fatalf("message %q, want the filtered one", got)
	}
}
