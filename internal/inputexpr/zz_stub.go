package inputexpr

import "context"

const (
	Object  = "object"
	Objects = "objects"
)

type Program struct{}
type Value struct{ Literal, Text string }

func Compile(expr, v string) (*Program, error)                    { return &Program{}, nil }
func FieldPath(path string) (string, error)                       { return path, nil }
func (p *Program) Eval(ctx context.Context, value any) (Value, error) { return Value{}, nil }
