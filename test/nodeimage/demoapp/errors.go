package main

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
)

// perMillion is the resolution of ERROR_RATIO: it is rounded to millionths, so that which
// requests fail is integer arithmetic, without floating-point surprises.
const perMillion = 1_000_000

// errorPlan decides which answers of GET / are deliberate errors (ERROR_RATIO). Requests are
// numbered from 1 in the order they reach the handler, per process; request n fails when
// floor(n*r) > floor((n-1)*r), r the ratio. Of the first N requests exactly floor(N*r) fail,
// evenly spread: r=0.5 fails requests 2, 4, 6...; r=0.25 fails 4, 8...; r=1 all; r=0 none. Not
// random, so a test counting answers knows what to expect; with several replicas each Pod
// numbers its own requests.
type errorPlan struct {
	ratio string // as given, for the error body
	ppm   uint64 // the ratio in millionths, 0..perMillion
	seq   atomic.Uint64
}

// parseErrorRatio reads ERROR_RATIO: empty is 0; else a number from 0 to 1.
func parseErrorRatio(s string) (*errorPlan, error) {
	if s == "" {
		return &errorPlan{ratio: "0"}, nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(r) || r < 0 || r > 1 {
		return nil, fmt.Errorf("ERROR_RATIO=%q: want a number from 0 to 1 (the share of GET / answered with 500), or nothing for 0", s)
	}
	return &errorPlan{ratio: s, ppm: uint64(math.Round(r * perMillion))}, nil
}

// next numbers a request and tells whether it is to fail.
func (p *errorPlan) next() (n uint64, fail bool) {
	n = p.seq.Add(1)
	return n, n*p.ppm/perMillion > (n-1)*p.ppm/perMillion
}

func (p *errorPlan) String() string { return p.ratio }
