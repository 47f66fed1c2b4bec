package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// shardLabel puts a KCLArtifact in a shard when the run has several (--shards): each controller
// process watches the KCLArtifacts whose key its --watch-label-selector matches, Flux's sharding
// label (docs/operations.md#sharding).
const shardLabel = "sharding.fluxcd.io/key"

// controllerProc is one controller process of the run and the sampler of its processes.
type controllerProc struct {
	ctrl *fluxenv.KCLController
	smp  *sampler
}

// procs lists the controller processes: the first (b.ctrl) and, in a sharded run, the others.
func (b *bench) procs() []controllerProc {
	return append([]controllerProc{{b.ctrl, b.smp}}, b.moreShards...)
}

// shardOf is the shard of the i-th KCLArtifact of a pass.
func shardOf(i, shards int) string { return "shard" + strconv.Itoa(i%shards) }

// startControllers starts the controller, or one per shard, each with its own storage.
func (b *bench) startControllers(ctx context.Context) error {
	for i := range b.cfg.shards {
		name, args := controllerName, b.cfg.controllerArgs
		if b.cfg.shards > 1 {
			name = fmt.Sprintf("%s-shard-%d", controllerName, i)
			args = append([]string{"--watch-label-selector=" + shardLabel + "=" + shardOf(i, b.cfg.shards)}, args...)
		}
		c, err := b.env.StartKCLController(ctx, fluxenv.KCLControllerOptions{Binary: b.binary, Name: name, Args: args, Env: b.cfg.controllerEnv})
		if err != nil {
			return fmt.Errorf("starting %s: %w", name, err)
		}
		p := controllerProc{ctrl: c, smp: newSampler(c.PID())}
		if i == 0 {
			b.ctrl, b.smp = p.ctrl, p.smp
		} else {
			b.moreShards = append(b.moreShards, p)
		}
		if _, err := scrapeMetrics(ctx, c.MetricsURL()); err != nil {
			return fmt.Errorf("the metrics of %s: %w", name, err)
		}
	}
	return nil
}

// mergeScrapes puts the series of several controllers' scrapes together: a sum over them is the
// sum over the controllers.
func mergeScrapes(ss []scrape) scrape {
	out := scrape{}
	for _, s := range ss {
		for name, series := range s {
			out[name] = append(out[name], series...)
		}
	}
	return out
}

// shardDetails says what each shard did over a phase, to show that each handled its half.
func shardDetails(start, end mark) string {
	if len(end.shards) < 2 {
		return ""
	}
	var parts []string
	for i := range end.shards {
		rec, _ := delta(start.shards[i], end.shards[i], mReconciles, map[string]string{"controller": "kclartifact"})
		ren, _ := delta(start.shards[i], end.shards[i], mRenders, nil)
		req, _ := delta(start.shards[i], end.shards[i], mRESTRequests, nil)
		cpu := ticksToDuration(end.cpu[i].ctrl.CPU() - start.cpu[i].ctrl.CPU())
		parts = append(parts, fmt.Sprintf("shard %d: reconciles %.0f, renders %.0f, API requests %.0f, controller CPU %.1f s, peak RSS %.0f MB",
			i, rec, ren, req, cpu.Seconds(), mb(end.hwm[i])))
	}
	return strings.Join(parts, "; ")
}
