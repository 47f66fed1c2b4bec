package ociartifact

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestDigestTag(t *testing.T) {
	hex := strings.Repeat("0a", 32)
	tag, err := DigestTag("sha256:" + hex)
	if err != nil || tag != "kcl-sha256-"+hex {
		t.Fatalf("DigestTag = %q, %v", tag, err)
	}
	// cosign reads "sha256-<hex>" tags as referrers fallback or signature tags.
	if strings.HasPrefix(tag, "sha256-") || len(tag) > 128 {
		t.Errorf("tag %q could be taken for a cosign tag, or is too long", tag)
	}
	for _, bad := range []string{"", hex, "sha256:" + hex[:63], "sha256:" + strings.ToUpper(hex),
		"sha512:" + hex + hex, "sha256:" + hex + "\n", "sha256:" + strings.Repeat("g", 64)} {
		if tag, err := DigestTag(bad); err == nil {
			t.Errorf("DigestTag(%q) = %q, want an error", bad, tag)
		}
	}
}

func TestCosignTags(t *testing.T) {
	h := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	if got := SignatureTag(h); got != "sha256-"+h.Hex+".sig" {
		t.Errorf("SignatureTag = %q", got)
	}
	if got := AttestationTag(h); got != "sha256-"+h.Hex+".att" {
		t.Errorf("AttestationTag = %q", got)
	}
}
