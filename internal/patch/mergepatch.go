package patch

import (
	"bytes"
	"encoding/json"
	"errors"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// statusMergePatch is the JSON merge patch that turns a KCLArtifact's status from `from` into
// the one of the object it is sent for: what client.MergeFrom computes over the status, without
// decoding both statuses into maps. Top-level fields are compared as encoded JSON, and only the
// objects among them that changed are diffed; a no-op reconcile changes one string, and the
// whole diff was a twentieth of its CPU.
type statusMergePatch struct {
	from kclv1.KCLArtifactStatus
	// lockedTo, when set, is the resourceVersion the patch was computed from: the API server
	// refuses it on a newer object (an optimistic lock, as client.MergeFromWithOptimisticLock).
	lockedTo string
}

func (p statusMergePatch) Type() types.PatchType { return types.MergePatchType }

func (p statusMergePatch) Data(obj client.Object) ([]byte, error) {
	o, ok := obj.(*kclv1.KCLArtifact)
	if !ok {
		return nil, errors.New("a status merge patch is for a KCLArtifact")
	}
	diff, err := fieldsMergePatch(p.from, o.Status)
	if err != nil {
		return nil, err
	}
	patch := map[string]any{}
	if len(diff) > 0 {
		patch["status"] = diff
	}
	if p.lockedTo != "" {
		patch["metadata"] = map[string]string{"resourceVersion": p.lockedTo}
	}
	return json.Marshal(patch)
}

// fieldsMergePatch is the RFC 7386 merge patch from before to after, two values encoding to JSON
// objects, as a map of their top-level fields.
func fieldsMergePatch(before, after any) (map[string]json.RawMessage, error) {
	b, err := topLevelFields(before)
	if err != nil {
		return nil, err
	}
	a, err := topLevelFields(after)
	if err != nil {
		return nil, err
	}
	patch := map[string]json.RawMessage{}
	for k := range b {
		if _, ok := a[k]; !ok {
			patch[k] = json.RawMessage("null")
		}
	}
	for k, av := range a {
		bv, ok := b[k]
		switch {
		case ok && bytes.Equal(av, bv):
		case ok && isJSONObject(av) && isJSONObject(bv):
			if patch[k], err = jsonpatch.CreateMergePatch(bv, av); err != nil {
				return nil, err
			}
		default:
			patch[k] = av
		}
	}
	return patch, nil
}

func topLevelFields(v any) (map[string]json.RawMessage, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	return fields, json.Unmarshal(data, &fields)
}

func isJSONObject(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }
