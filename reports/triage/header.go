package triage

import "fmt"

// headerRanks gives the torch-profiler traces among cands whose names carry no rank the rank
// their headers record (distributedInfo.rank), and refuses a set whose headers disagree on
// world_size: such files come from different jobs, whatever their names say. A header without
// distributedInfo leaves the file as it was (oneJob then decides). With fewer than two
// candidates there is nothing to compare or tell apart, so no file is opened; a named single
// file gets its header rank in the runner (checkFileRank). The world-size refusal is returned
// apart (worldErr), for the caller to give after oneJob's: two files that claim one rank say
// more about what is wrong than their sizes do. err is a header that could not be read.
func headerRanks(root string, cands []Input, header func(string) (int, int, error)) (worldErr, err error) {
	if header == nil || len(cands) < 2 {
		return nil, nil
	}
	world, worldFrom := -1, ""
	for i := range cands {
		c := &cands[i]
		if c.Format != FormatKineto {
			continue
		}
		rank, ws, err := header(c.Path)
		if err != nil {
			return nil, fmt.Errorf("read the header of %s: %w", c.Path, err)
		}
		if c.Rank.Primary() < 0 && rank >= 0 {
			c.Rank.Global = rank
			c.RankFromHeader = true
		}
		if ws <= 0 {
			continue
		}
		if world < 0 {
			world, worldFrom = ws, c.Path
		} else if ws != world && worldErr == nil {
			worldErr = &MixedInputsError{fmt.Sprintf("%s holds traces of jobs of different sizes (distributedInfo.world_size %d in %s, %d in %s): they are not ranks of one job; pass one file, or a directory that holds the traces of one job only", root, world, worldFrom, ws, c.Path)}
		}
	}
	return worldErr, nil
}
