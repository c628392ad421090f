package rivet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Reasonf falls back to the kind's own (group, code) for a pair it does
// not list, so that a node never fails to answer over a reason; a typo in
// one would then go out as the kind's pair, silently, and a script or
// client matching the reason would never see it. So every Reasonf in the
// module with a literal group and code must name a listed pair (or the
// kind's own).
func TestEveryReasonfNamesAListedReason(t *testing.T) {
	byName := map[string]error{
		"ErrNotFound": ErrNotFound, "ErrUnknownActor": ErrUnknownActor, "ErrUnknownAction": ErrUnknownAction,
		"ErrUnknownQueue": ErrUnknownQueue, "ErrUnknownEvent": ErrUnknownEvent, "ErrAlreadyExists": ErrAlreadyExists,
		"ErrInvalidArgument": ErrInvalidArgument, "ErrTooLarge": ErrTooLarge, "ErrQueueFull": ErrQueueFull,
		"ErrUnavailable": ErrUnavailable, "ErrWorkflowFailed": ErrWorkflowFailed,
		"ErrFailedPrecondition": ErrFailedPrecondition, "ErrTimeout": ErrTimeout,
		"ErrUnauthenticated": ErrUnauthenticated, "ErrInternal": ErrInternal, "ErrUser": ErrUser,
	}
	if len(byName) != len(kinds) {
		t.Fatalf("the test knows %d kinds, the package lists %d: add the new one to byName", len(byName), len(kinds))
	}
	listed := func(kind error, group, code string) bool {
		for _, k := range kinds {
			if k.err == kind && k.group == group && k.code == code {
				return true
			}
		}
		for _, r := range reasons {
			if r.err == kind && r.group == group && r.code == code {
				return true
			}
		}
		return false
	}
	calls := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 3 {
				return true
			}
			var fn string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			}
			if fn != "Reasonf" {
				return true
			}
			var kindName string
			switch k := call.Args[0].(type) {
			case *ast.Ident:
				kindName = k.Name
			case *ast.SelectorExpr:
				kindName = k.Sel.Name
			}
			group, gok := stringLit(call.Args[1])
			code, cok := stringLit(call.Args[2])
			if !gok || !cok {
				return true // a computed reason: its values are the caller's to test
			}
			calls++
			kind, ok := byName[kindName]
			if !ok {
				t.Errorf("%s: Reasonf with kind %s, not a sentinel of this package", fset.Position(call.Pos()), kindName)
				return true
			}
			if !listed(kind, group, code) {
				t.Errorf("%s: Reasonf(%s, %q, %q) names a reason that is not listed in reasons: it goes out as %s's own", fset.Position(call.Pos()), kindName, group, code, kindName)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("found no Reasonf call with a literal reason: the walk missed the module")
	}
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
