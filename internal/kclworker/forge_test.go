package kclworker

import (
	"bufio"
	"os"
)

// ForgingWorker is a stand-in for a compromised worker, which the sandbox makes impossible to
// build from a KCL program: it answers each request first with a frame that lacks the request's
// nonce, then with the real answer. It exists so the pool's protocol checks are tested on their
// own.
const ForgingWorker = "__forging-kcl-worker"

// HugeFrameWorker is another stand-in: it announces an answer of almost 4 GiB and sends nothing.
const HugeFrameWorker = "__huge-frame-kcl-worker"

// ServeForgingWorker runs ForgingWorker when the process was started as one.
func ServeForgingWorker() {
	if len(os.Args) < 2 || os.Args[1] != ForgingWorker && os.Args[1] != HugeFrameWorker {
		return
	}
	ch := os.NewFile(3, "channel")
	in := bufio.NewReader(ch)
	for {
		f, err := readFrame(in, maxRequest)
		if err != nil {
			os.Exit(0)
		}
		req, err := decodeRequest(f)
		if err != nil {
			os.Exit(1)
		}
		if os.Args[1] == HugeFrameWorker {
			_, _ = ch.Write([]byte{0xff, 0xff, 0xff, 0xf0})
			select {}
		}
		var forged nonce
		_ = writeFrame(ch, encodeAnswer(forged, statusOK, []byte{})...)
		_ = writeFrame(ch, encodeAnswer(req.nonce, statusOK, []byte{})...)
	}
}
