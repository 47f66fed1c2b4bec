package eventqueue

import (
	"github.com/fluxcd/pkg/runtime/logger"
	"github.com/go-logr/logr"
)

// withoutTrace keeps the posting half of Flux's recorder from logging each event at trace level
// a second time: the inline half has logged it when it was recorded. Its errors still show.
func withoutTrace(l logr.Logger) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return l.WithSink(noTrace{l.GetSink()})
}

type noTrace struct{ logr.LogSink }

func (s noTrace) Enabled(level int) bool {
	return level < logger.TraceLevel && s.LogSink.Enabled(level)
}

func (s noTrace) WithValues(kv ...any) logr.LogSink { return noTrace{s.LogSink.WithValues(kv...)} }

func (s noTrace) WithName(name string) logr.LogSink { return noTrace{s.LogSink.WithName(name)} }
