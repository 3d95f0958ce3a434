package sglang

import (
	"path/filepath"
	"strings"

	"github.com/sglprof/runner/plans"
)

// The LLM server's launcher. `sglang serve --model-type llm` exists only in newer SGLang: the
// older `sglang serve` (cli/serve.py without the backend registry) takes no --model-type and
// hands every argument to the LLM server's argparse, which rejects it ("unrecognized
// arguments: --model-type llm"); `python -m sglang.launch_server` serves LLMs in every
// version. The runner asks the installed `sglang serve --help` (ServeHelpArgs) and lets
// LLMLauncher choose (docs/upstream.md).

// ServeHelpArgs are the arguments after the sglang command that print `sglang serve`'s help,
// whose text says whether it takes --model-type.
var ServeHelpArgs = []string{"serve", "--help"}

// NeedsLauncherProbe reports whether cell c's server command depends on the SGLang version:
// an LLM serve cell launched through the `sglang` console script.
func NeedsLauncherProbe(c plans.Cell, command []string) bool {
	return ModelType(c) == ModelTypeLLM && len(command) == 1 && filepath.Base(command[0]) == "sglang" && !isLaunchServer(command)
}

// LLMLauncher chooses the LLM server's command from `sglang serve --help` (help, the probe's
// output; probeErr its failure, if any): command itself when the help names --model-type,
// else `<python> -m sglang.launch_server` with the Python beside the sglang script (python;
// "python3" when unknown). note says which was chosen and why, for the run's log.
func LLMLauncher(command []string, help string, probeErr error, python string) (argv []string, note string) {
	if probeErr == nil && strings.Contains(help, "--model-type") {
		return command, "sglang serve takes --model-type: LLM servers start with `sglang serve --model-type llm`"
	}
	if python == "" {
		python = "python3"
	}
	why := "`sglang serve --help` does not mention --model-type (an SGLang older than the serve backend override)"
	if probeErr != nil {
		why = "`sglang serve --help` failed (" + probeErr.Error() + ")"
	}
	return []string{python, "-m", "sglang.launch_server"}, why + ": LLM servers start with `" + python + " -m sglang.launch_server`"
}
