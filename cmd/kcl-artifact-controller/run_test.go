package main

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	flag "github.com/spf13/pflag"

	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// A kernel without Landlock cannot be had here: sandbox.ABI stands for one.
func TestRefusesToStartWithoutLandlock(t *testing.T) {
	saved := sandbox.ABI
	sandbox.ABI = func() int { return 0 }
	defer func() { sandbox.ABI = saved }()
	area, err := staging.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = startEngine(context.Background(), runFlags{sandbox: sandboxOn}, area)
	if err == nil || !strings.Contains(err.Error(), "Landlock") || !strings.Contains(err.Error(), "--kcl-sandbox=off") {
		t.Fatalf("want a refusal naming Landlock and --kcl-sandbox=off, got %v", err)
	}
}

func TestRefusesAnUnknownSandboxMode(t *testing.T) {
	area, err := staging.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := startEngine(context.Background(), runFlags{sandbox: "maybe"}, area); err == nil {
		t.Fatal("--kcl-sandbox=maybe was accepted")
	}
}

func parsedFlags(t *testing.T, args ...string) runFlags {
	t.Helper()
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSettingsRefuseWhatDoesNotParse(t *testing.T) {
	for _, tc := range []struct{ arg, flag string }{
		{"--feature-gates=NoSuchGate=true", "--feature-gates"},
		{"--watch-label-selector=a in (", "--watch-label-selector"},
		{"--watch-configs-label-selector=!!", "--watch-configs-label-selector"},
		{"--interval-jitter-percentage=100", "--interval-jitter-percentage"},
		{"--kcl-deps-allowed-networks=300.0.0.0/8", "--kcl-deps-allowed-networks"},
		{"--kcl-deps-proxy=socks5://proxy:1080", "--kcl-deps-proxy"},
		{"--expression-time-budget=0s", "--expression-time-budget"},
	} {
		f := parsedFlags(t, tc.arg)
		if _, err := f.settings(logr.Discard()); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: want an error naming %s, got %v", tc.arg, tc.flag, err)
		}
	}
}

func TestFeatureGatesShapeTheCache(t *testing.T) {
	f := parsedFlags(t)
	w, err := f.settings(logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	opts := managerOptions(f, w)
	if opts.Client.Cache == nil || len(opts.Client.Cache.DisableFor) != 2 || w.configsPredicate == nil {
		t.Fatalf("by default ConfigMaps and Secrets are read from the API and the watched ones trigger renders")
	}

	f = parsedFlags(t, "--feature-gates=CacheSecretsAndConfigMaps=true,DisableConfigWatchers=true")
	if w, err = f.settings(logr.Discard()); err != nil {
		t.Fatal(err)
	}
	opts = managerOptions(f, w)
	if len(opts.Client.Cache.DisableFor) != 0 || w.configsPredicate != nil {
		t.Fatalf("CacheSecretsAndConfigMaps caches them and DisableConfigWatchers stops the watches: %+v", opts.Client.Cache)
	}
	// ImagePolicies and the allowed kinds are unstructured: read from the cache their watches fill
	if !opts.Client.Cache.Unstructured {
		t.Fatalf("unstructured objects are read from the API server")
	}
}

func TestEachShardElectsItsOwnLeader(t *testing.T) {
	main := leaderElectionID(parsedFlags(t, "--watch-label-selector=!sharding.fluxcd.io/key").watch)
	shard := leaderElectionID(parsedFlags(t, "--watch-label-selector=sharding.fluxcd.io/key=shard1").watch)
	plain := leaderElectionID(parsedFlags(t).watch)
	if plain != "kcl-artifact-controller-leader-election" || main == shard || main == plain ||
		!strings.HasPrefix(shard, plain+"-") {
		t.Fatalf("leases: plain %q, main %q, shard %q", plain, main, shard)
	}
}

// Flux's name for the download retries, and this project's server flags out of pkg/artifact's
// --artifact- prefix (a flag it adds later would collide and panic at start); the old names
// still work for one release, deprecated.
func TestRenamedFlagsKeepTheirOldNames(t *testing.T) {
	for _, args := range [][]string{
		{"--http-retry=3", "--server-yaml-views=5", "--server-write-timeout=7s", "--server-diff-max-size=1024"},
		{"--artifact-fetch-retries=3", "--artifact-yaml-views=5", "--artifact-write-timeout=7s", "--artifact-diff-max-size=1024"},
	} {
		f := parsedFlags(t, args...)
		if f.fetch.Retries != 3 || f.server.MaxYAMLViews != 5 || f.server.WriteTimeout.Seconds() != 7 || f.server.MaxDiffYAML != 1024 {
			t.Errorf("%v: retries %d, views %d, timeout %s, diff %d", args, f.fetch.Retries, f.server.MaxYAMLViews, f.server.WriteTimeout, f.server.MaxDiffYAML)
		}
	}
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.bind(fs)
	for _, old := range []string{"artifact-fetch-retries", "artifact-yaml-views", "artifact-write-timeout", "artifact-diff-max-size"} {
		if fl := fs.Lookup(old); fl == nil || fl.Deprecated == "" {
			t.Errorf("--%s is not a deprecated alias", old)
		}
	}
	if fl := fs.Lookup("http-retry"); fl == nil || fl.DefValue != "9" {
		t.Error("--http-retry with Flux's default 9")
	}
}
