package main

import (
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// rewrite returns the go.mod file gomod with every requirement on a project
// module set to version and the replace directives of project modules
// dropped: what a published go.mod must say.
func rewrite(file string, gomod []byte, project map[string]bool, version string) ([]byte, error) {
	f, err := modfile.Parse(file, gomod, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range f.Require {
		if project[r.Mod.Path] && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return nil, err
			}
		}
	}
	var dropped []module.Version
	for _, r := range f.Replace {
		if project[r.Old.Path] {
			dropped = append(dropped, r.Old)
		}
	}
	for _, old := range dropped {
		if err := f.DropReplace(old.Path, old.Version); err != nil {
			return nil, err
		}
	}
	f.Cleanup()
	return modfile.Format(f.Syntax), nil
}

// rewriteWork returns the go.work file work with its replace directives of
// project modules moved to version: they map the version the modules require
// to their directories, which is what lets go.work builds skip the network.
func rewriteWork(work []byte, project map[string]bool, version string) ([]byte, error) {
	f, err := modfile.ParseWork("go.work", work, nil)
	if err != nil {
		return nil, err
	}
	var moved []modfile.Replace // copies: DropReplace clears the originals
	for _, r := range f.Replace {
		if project[r.Old.Path] && r.Old.Version != "" && r.Old.Version != version {
			moved = append(moved, *r)
		}
	}
	for _, r := range moved {
		// Add before dropping, so the new line takes the old one's place.
		if err := f.AddReplace(r.Old.Path, version, r.New.Path, r.New.Version); err != nil {
			return nil, err
		}
		if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return nil, err
		}
	}
	f.Cleanup()
	return modfile.Format(f.Syntax), nil
}
