// kstatus reads Kubernetes objects as JSON on stdin (one object, or a JSON array of objects) and
// prints what sigs.k8s.io/cli-utils' kstatus (`status.Compute`, the library kpt, Flux and
// `kubectl`-adjacent tooling use) says of each: {"status": "...", "message": "..."}, one JSON
// value per input object (an array for an array). Built by hack/testenv build (a tool of the
// GitOps status tests, tests/cluster/test_gitops_status.py).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func compute(obj map[string]interface{}) (result, error) {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return result{}, err
	}
	conds := res.Conditions
	if conds == nil {
		conds = []status.Condition{}
	}
	return result{Status: res.Status.String(), Message: res.Message, Conditions: conds}, nil
}

func run() error {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	// As the API machinery reads JSON: integers as int64 (kstatus reads generations as int64).
	var input interface{}
	if err := utiljson.Unmarshal(data, &input); err != nil {
		return fmt.Errorf("stdin is not JSON: %w", err)
	}
	var out interface{}
	switch v := input.(type) {
	case map[string]interface{}:
		if out, err = compute(v); err != nil {
			return err
		}
	case []interface{}:
		results := make([]result, 0, len(v))
		for i, item := range v {
			obj, ok := item.(map[string]interface{})
			if !ok {
				return fmt.Errorf("item %d is not an object", i)
			}
			res, err := compute(obj)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			results = append(results, res)
		}
		out = results
	default:
		return fmt.Errorf("stdin must hold an object or an array of objects")
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}
