package inputexpr

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"regexp/syntax"
	"sync/atomic"

	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// Charging by size. cel-go's default runtime cost charges a conversion (double(), int(), ...) and
// size() one unit whatever the size of their input, and an equality of lists or maps by their
// number of elements, not by what comparing them walks: over a 250 KB string, a million
// conversions cost as many units as a million additions. costEstimator charges them as Kubernetes'
// CEL library (k8s.io/apiserver/pkg/cel/library/cost.go) charges its string functions: a tenth of
// a unit per byte of the input (common.StringTraversalCostFactor), on top of the one unit the call
// costs. It implements both checker.CostEstimator (Compile's estimate) and
// interpreter.ActualCostEstimator (the runtime tracker, which adds a call's cost after the call).
type costEstimator struct{}

var estimator costEstimator

// sizeCharged are the functions whose work is proportional to the size of their first argument
// (the receiver of a member call): the conversions that parse or copy a string or bytes, size()
// of a string (it counts runes), and the strings extension's functions, charged as Kubernetes does
// should the extension ever be added (it is left out: see the package comment).
var sizeCharged = map[string]float64{
	"int": 1, "uint": 1, "double": 1, "bool": 1, "string": 1, "bytes": 1,
	"timestamp": 1, "duration": 1, "size": 1,
	"lowerAscii": 1, "upperAscii": 1, "trim": 1, "substring": 1, "charAt": 1,
	"indexOf": 1, "lastIndexOf": 1, "reverse": 1, "quote": 1, "strings.quote": 1,
	// a traversal and the construction of a result as large
	"replace": 2, "split": 2, "format": 2,
}

// CallCost implements interpreter.ActualCostEstimator. nil leaves a call to cel-go's default.
func (costEstimator) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	limitViolation(result)
	for _, a := range args {
		limitViolation(a)
	}
	if len(args) == 0 {
		return nil
	}
	switch function {
	case "matches":
		if len(args) == 2 {
			c := regexCost(args[0], args[1])
			return &c
		}
	case "join":
		// the result's size: what was traversed and built
		c := 1 + stringCost(result, 2)
		return &c
	case "_==_", "_!=_":
		if len(args) == 2 && isAggregate(args[0]) && isAggregate(args[1]) {
			// comparing walks the smaller side at most
			c := 1 + traversal(args[0], traversal(args[1], CostLimit+1))
			return &c
		}
	case "@in":
		if len(args) == 2 {
			if l, ok := args[1].(traits.Lister); ok {
				// each element is compared with the needle, which walks the needle at most
				n := uint64(l.Size().(types.Int))
				c := satMul(n, max(1, traversal(args[0], CostLimit+1)))
				return &c
			}
		}
	}
	if factor, ok := sizeCharged[function]; ok {
		if c := stringCost(args[0], factor); c > 0 {
			c++
			return &c
		}
	}
	return nil
}

// stringCost is factor tenths of a unit per byte of a string or bytes value; 0 for other values.
func stringCost(v ref.Val, factor float64) uint64 {
	var n int
	switch s := v.(type) {
	case types.String:
		n = len(s)
	case types.Bytes:
		n = len(s)
	default:
		return 0
	}
	return uint64(math.Ceil(float64(n) * factor * common.StringTraversalCostFactor))
}

func isAggregate(v ref.Val) bool {
	switch v.(type) {
	case traits.Lister, traits.Mapper:
		return true
	}
	return false
}

// traversal is the cost of walking v as a tree, as Kubernetes' traversalCost counts it (a tenth
// of a unit per byte of a string, one unit per scalar), stopping once it reaches limit: what
// is over the limit need not be counted, and counting it would itself be unbounded work.
func traversal(v ref.Val, limit uint64) uint64 {
	var cost uint64
	var walk func(ref.Val)
	walk = func(v ref.Val) {
		if cost >= limit {
			return
		}
		switch t := v.(type) {
		case types.String, types.Bytes:
			cost += max(1, stringCost(t, 1))
		case traits.Lister:
			for it := t.Iterator(); it.HasNext() == types.True && cost < limit; {
				walk(it.Next())
			}
		case traits.Mapper:
			for it := t.Iterator(); it.HasNext() == types.True && cost < limit; {
				k := it.Next()
				walk(k)
				walk(t.Get(k))
			}
		default:
			cost++
		}
	}
	walk(v)
	return min(cost, limit)
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// EstimateCallCost implements checker.CostEstimator for Compile's estimate: the same charges
// where the size of the input is known (a literal); nil leaves a call to cel-go's default.
func (costEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	first := target
	if first == nil && len(args) > 0 {
		first = &args[0]
	}
	if first == nil {
		return nil
	}
	factor, ok := sizeCharged[function]
	if !ok {
		return nil
	}
	if k := (*first).Type().Kind(); k != types.StringKind && k != types.BytesKind {
		return nil
	}
	sz := checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
	if s := (*first).ComputedSize(); s != nil {
		sz = *s
	}
	cost := sz.MultiplyByCostFactor(factor * common.StringTraversalCostFactor).Add(checker.CostEstimate{Min: 1, Max: 1})
	return &checker.CallEstimate{CostEstimate: cost}
}

// EstimateSize implements checker.CostEstimator: the sizes of the variable are not known when
// the expression is compiled (CEL takes them as 0 to unbounded).
func (costEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

// Regular expressions. Go's regexp matches in time proportional to the input's length times the
// size of the compiled pattern, which counted repetitions multiply: `a{1000}` is 8 bytes and a
// thousand instructions. Kubernetes charges the pattern's length, which lets a 71-byte pattern
// run for 13 seconds over a 64 KiB string in one call, and a call cannot be interrupted. Here a
// match is charged a tenth of a unit per byte of the input times RegexInstructionCost units per
// instruction of the compiled pattern, and a match whose charge alone is over CostLimit is
// refused before it runs (matchGuarded).

// RegexInstructionCost is the charge per instruction of a compiled pattern, per ten bytes of
// input: matching took about 20 ns per byte and instruction, measured, so CostLimit allows one
// match of about 100 ms at most.
const RegexInstructionCost = 2

// regexCost is the charge of matching s against pattern p; over CostLimit when p does not
// compile (the match fails without running).
func regexCost(s, p ref.Val) uint64 {
	str, ok1 := s.(types.String)
	pat, ok2 := p.(types.String)
	if !ok1 || !ok2 {
		return 1
	}
	insts := instructions(string(pat))
	strCost := uint64(math.Ceil((1 + float64(len(str))) * common.StringTraversalCostFactor))
	return satMul(strCost, satMul(uint64(insts), RegexInstructionCost))
}

// lastPattern caches the size of the last pattern compiled: the guard and the tracker both need
// it for every match, and an expression mostly matches against one literal pattern.
var lastPattern atomic.Pointer[patternSize]

type patternSize struct {
	pattern string
	insts   int
}

// instructions is the size of p compiled as Go's regexp compiles it; 1 when it does not compile.
func instructions(p string) int {
	if c := lastPattern.Load(); c != nil && c.pattern == p {
		return c.insts
	}
	n := 1
	if re, err := syntax.Parse(p, syntax.Perl); err == nil {
		if prog, err := syntax.Compile(re.Simplify()); err == nil {
			n = max(1, len(prog.Inst))
		}
	}
	lastPattern.Store(&patternSize{pattern: p, insts: n})
	return n
}

// matchGuarded is CEL's matches(), refused before it runs when its charge alone is over
// CostLimit: the tracker would stop the evaluation right after it anyway.
func matchGuarded(s, p ref.Val) ref.Val {
	str, ok := s.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(s)
	}
	pat, ok := p.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(p)
	}
	if c := regexCost(str, pat); c > CostLimit {
		panic(interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded, Message: fmt.Sprintf(
			"a match of a %d-byte string against a pattern of %d instructions would cost %d", len(str), instructions(string(pat)), c)})
	}
	re, err := regexp.Compile(string(pat))
	if err != nil {
		return types.WrapErr(err)
	}
	return types.Bool(re.MatchString(string(str)))
}

// Sizes an expression may read. The object is JSON as the API server returns it (or as a render
// produced it); the expression sees it through cappedAdapter, which turns a string, list or map
// over these bounds into an error value, and an evaluation that uses such a value (passes it to
// a function or operator, or returns it) is stopped with a LimitError. One that only tests its
// presence (has(), in) or never reads it is not: a large annotation elsewhere in the object does
// not fail an expression that reads the object's name.
const (
	MaxStringBytes = 64 << 10 // the same as MaxResultBytes
	MaxListLength  = 10_000   // the items of a list, the entries of a map
)

// cappedAdapter turns the object's JSON into CEL values lazily, as cel-go's own adapter does,
// refusing strings, lists and maps over the bounds.
type cappedAdapter struct{}

var capped cappedAdapter

func (a cappedAdapter) NativeToValue(v any) ref.Val {
	switch t := v.(type) {
	case string:
		if len(t) > MaxStringBytes {
			return tooLarge(fmt.Sprintf("a string of %d bytes, over the limit of %d bytes", len(t), MaxStringBytes))
		}
		return types.String(t)
	case []any:
		if len(t) > MaxListLength {
			return tooLarge(fmt.Sprintf("a list of %d items, over the limit of %d items", len(t), MaxListLength))
		}
		return types.NewDynamicList(a, t)
	case map[string]any:
		if len(t) > MaxListLength {
			return tooLarge(fmt.Sprintf("a map of %d entries, over the limit of %d entries", len(t), MaxListLength))
		}
		return types.NewStringInterfaceMap(a, t)
	case []map[string]any:
		if len(t) > MaxListLength {
			return tooLarge(fmt.Sprintf("a list of %d items, over the limit of %d items", len(t), MaxListLength))
		}
		return types.NewDynamicList(a, t)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// topLevel adapts the variable itself: the list of a render's objects is bounded by
// --kcl-max-objects, not by MaxListLength; what it holds is capped.
func topLevel(v any) ref.Val {
	switch t := v.(type) {
	case []any, []map[string]any:
		return types.NewDynamicList(capped, t)
	}
	return capped.NativeToValue(v)
}

// oversized stands for a value over the bounds. Finding it (has(), in, a field read on the way
// to another) is not using it; anything that calls one of its methods (a function's overload
// dispatch, an operator, a comparison, a conversion) uses it and stops the evaluation, and so
// does handing it to a function (CallCost) or returning it (EvalWithin). It has no String
// method: fmt recovers a panic from one.
type oversized struct{ what string }

func (o oversized) use() {
	panic(interpreter.EvalCancelledError{Cause: sizeLimitCause, Message: "it read " + o.what})
}

func (o oversized) ConvertToNative(reflect.Type) (any, error) { o.use(); return nil, nil }
func (o oversized) ConvertToType(ref.Type) ref.Val            { o.use(); return nil }
func (o oversized) Equal(ref.Val) ref.Val                     { o.use(); return nil }
func (o oversized) Type() ref.Type                            { o.use(); return nil }
func (o oversized) Value() any                                { o.use(); return nil }

func tooLarge(what string) ref.Val { return oversized{what: what} }

// sizeLimitCause marks an evaluation stopped for a value over the bounds.
const sizeLimitCause interpreter.CancellationCause = 1001

// oversizedResult tells a result that is, or holds, a value over the bounds.
func oversizedResult(v ref.Val) (oversized, bool) {
	if o, ok := v.(*types.Optional); ok && o.HasValue() {
		v = o.GetValue()
	}
	o, ok := v.(oversized)
	return o, ok
}

// limitViolation stops the evaluation when v stands for a value over the bounds.
func limitViolation(v ref.Val) {
	if o, ok := oversizedResult(v); ok {
		o.use()
	}
}
