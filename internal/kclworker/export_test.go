package kclworker

// IdlePIDs lists the process IDs of idle workers of a domain, for tests that kill one from
// outside or check that domains never share one.
func (p *Pool) IdlePIDs(domain string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, w := range p.idle[domain] {
		pids = append(pids, w.cmd.Process.Pid)
	}
	return pids
}

// WithoutSeccomp turns the seccomp filter off in confined workers, to show what it prevents.
func WithoutSeccomp(o Options) Options {
	o.noSeccomp = true
	return o
}

// IdleMemory is the private memory of the idle workers as the pool counts it against
// MaxIdleMemory.
func (p *Pool) IdleMemory() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idleMem
}
