package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The module path every package of ours is under.
const modulePath = "github.com/sglprof/runner"

// layers is the import direction of docs/architecture.md, top first: a package may import
// packages of its own layer or of any layer below it, never one above. The layer of a package
// is its first path element.
var layers = []string{"cmd", "runner", "backends", "nsys", "reports", "plans"}

// goPackage is one directory of Go files: its import path and what its files import (tests
// included, so a test cannot reach upwards either).
type goPackage struct {
	dir     string // relative to the repository root, slash-separated
	imports map[string][]string
	files   map[string]*ast.File
}

// loadPackages parses every Go file of the repository (imports and declarations, not bodies'
// types: go/parser alone, so the check needs no build and runs in well under a second).
func loadPackages(t *testing.T) (root string, pkgs map[string]*goPackage) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs = map[string]*goPackage{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		pkg := pkgs[rel]
		if pkg == nil {
			pkg = &goPackage{dir: rel, imports: map[string][]string{}, files: map[string]*ast.File{}}
			pkgs[rel] = pkg
		}
		file, _ := filepath.Rel(root, p)
		pkg.files[filepath.ToSlash(file)] = f
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if ip == modulePath || strings.HasPrefix(ip, modulePath+"/") {
				dep := strings.TrimPrefix(strings.TrimPrefix(ip, modulePath), "/")
				pkg.imports[dep] = append(pkg.imports[dep], filepath.ToSlash(file))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, pkgs
}

func layerOf(dir string) int {
	top, _, _ := strings.Cut(dir, "/")
	for i, l := range layers {
		if l == top {
			return i
		}
	}
	return -1
}

// TestImportsPointDown is the import-direction rule of docs/architecture.md: every import of
// ours points to the same layer or one below (cmd → runner → backends → nsys → reports →
// plans); the orchestrator (package runner) is imported by cmd/* alone, so the packages beside
// it (bundles, load, processes) stay below it; and only cmd/* and the simulator itself import
// backends/sim, so the simulator is reached through the programs it replaces, never from
// measurement code (a test may start the simulator as the stand-in program it is).
func TestImportsPointDown(t *testing.T) {
	_, pkgs := loadPackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages; is the test running from cmd/runner?", len(pkgs))
	}
	var bad []string
	for dir, pkg := range pkgs {
		from := layerOf(dir)
		if from < 0 {
			bad = append(bad, dir+": not under one of the layers "+strings.Join(layers, ", "))
			continue
		}
		for dep, files := range pkg.imports {
			to := layerOf(dep)
			switch {
			case to < from:
				bad = append(bad, dir+" imports "+dep+" (up: "+layers[from]+" → "+layers[to]+") in "+files[0])
			case dep == "runner" && !strings.HasPrefix(dir, "cmd/"):
				bad = append(bad, dir+" imports the orchestrator runner in "+files[0]+" (only cmd/* may)")
			case (dep == "backends/sim" || strings.HasPrefix(dep, "backends/sim/")) &&
				!strings.HasPrefix(dir, "cmd/") && dir != "backends/sim" && !strings.HasPrefix(dir, "backends/sim/"):
				for _, f := range files {
					if !strings.HasSuffix(f, "_test.go") {
						bad = append(bad, dir+" imports the simulator "+dep+" in "+f+" (only cmd/* may)")
						break
					}
				}
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// leafImports are packages below the layers' rule: the one reader of files imports nothing of
// this module, and the run directory's schema imports only plans and that reader, so that every
// other package can read a file or a run directory without a cycle (tests included).
var leafImports = map[string][]string{
	"plans/infile":   {},
	"reports/rundir": {"plans", "plans/infile"},
}

// TestLeafPackagesImportLittle is the rule of leafImports.
func TestLeafPackagesImportLittle(t *testing.T) {
	_, pkgs := loadPackages(t)
	for dir, allowed := range leafImports {
		pkg := pkgs[dir]
		if pkg == nil {
			t.Errorf("package %s not found", dir)
			continue
		}
		for dep, files := range pkg.imports {
			if dep != dir && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s in %s; it may import only %v of this module", dir, dep, files[0], allowed)
			}
		}
	}
}

// TestImportDirectionCheckCanFail feeds the rule a made-up upward import, so a rule that
// silently accepted everything would be caught.
func TestImportDirectionCheckCanFail(t *testing.T) {
	if layerOf("reports/triage") <= layerOf("runner/proc") {
		t.Fatal("reports must sit below runner")
	}
	if layerOf("plans") != len(layers)-1 {
		t.Fatal("plans must be the lowest layer")
	}
	if layerOf("internal/x") != -1 {
		t.Fatal("a folder outside the layers must be reported")
	}
}

// TestNoAliasOfRunDirectoryTypes: a run-directory type has one name. A package that fills one
// uses the schema package's name for it instead of re-exporting it under another.
func TestNoAliasOfRunDirectoryTypes(t *testing.T) {
	_, pkgs := loadPackages(t)
	for _, pkg := range pkgs {
		for file, f := range pkg.files {
			alias := map[string]bool{}
			for _, im := range f.Imports {
				ip, _ := strconv.Unquote(im.Path.Value)
				if strings.HasSuffix(ip, "/rundir") {
					name := path.Base(ip)
					if im.Name != nil {
						name = im.Name.Name
					}
					alias[name] = true
				}
			}
			if len(alias) == 0 {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || !ts.Assign.IsValid() {
					return true
				}
				if sel, ok := ts.Type.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && alias[x.Name] {
						t.Errorf("%s: type %s = %s.%s re-exports a run-directory type; use %s.%s",
							file, ts.Name.Name, x.Name, sel.Sel.Name, x.Name, sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}

// TestDocsSpeakToUsers: the documents a user reads name no file outside the repository, no
// internal issue number and no design card the user never sees.
func TestDocsSpeakToUsers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	forbidden := regexp.MustCompile(`DESIGN\.md|\bref-[a-z-]+\.md|\b[Ii]ssues? #?[0-9]+`)
	for _, p := range docs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := forbidden.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s:%d mentions %q, which a user of the repository cannot follow", rel, i+1, m)
			}
		}
	}
}

// TestProcessesStartInOnePlace: only runner/proc starts processes (under its supervisor, in a
// process group, with the stop ladder), so that nothing the runner starts can outlive it or
// escape Ctrl-C. The exceptions, each for its reason: backends/sim stands in for programs
// (sglang, nsys) that start processes themselves, and does so as they would; and
// runner/slurm/slurmtest starts the daemons of a test cluster, which must outlive one call.
func TestProcessesStartInOnePlace(t *testing.T) {
	_, pkgs := loadPackages(t)
	allowed := map[string]bool{"runner/proc": true, "runner/proc/internal/supervisor": true, "backends/sim": true, "runner/slurm/slurmtest": true}
	starts := map[string]map[string]bool{
		"os/exec": {"Command": true, "CommandContext": true},
		"os":      {"StartProcess": true},
		"syscall": {"ForkExec": true, "Exec": true, "StartProcess": true},
	}
	found := 0
	for dir, pkg := range pkgs {
		for file, f := range pkg.files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			names := map[string]string{} // local package name → import path
			for _, im := range f.Imports {
				ip, _ := strconv.Unquote(im.Path.Value)
				if starts[ip] == nil {
					continue
				}
				name := path.Base(ip)
				if im.Name != nil {
					name = im.Name.Name
				}
				names[name] = ip
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, ok := sel.X.(*ast.Ident)
				if !ok || names[x.Name] == "" || !starts[names[x.Name]][sel.Sel.Name] {
					return true
				}
				found++
				if !allowed[dir] {
					t.Errorf("%s: %s.%s starts a process outside runner/proc; go through proc.Run, proc.Probe or proc.Command", file, x.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
	if found == 0 {
		t.Error("found no process start at all, not even runner/proc's: the check looks in the wrong place")
	}
}
