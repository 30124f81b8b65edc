// Command crdcheck runs the API server's own validation of a CustomResourceDefinition create on YAML files,
// offline: `crdcheck FILE...`. It decodes each CRD as apiextensions.k8s.io/v1, applies the server's defaults,
// converts it to the internal form and calls the same ValidateCustomResourceDefinition a create runs, which
// compiles every CEL rule and applies the CEL cost estimator's per-rule and per-CRD budgets. The Kubernetes
// release is the k8s.io/apiextensions-apiserver version the binary is built with (build.sh OUTPUT [MINOR]).
// It prints one JSON object per CRD document: {"file", "name", "release", "errors": [{"field", "detail"}]}, and exits
// 1 when any CRD is refused.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// release is stamped in by build.sh: the apiextensions-apiserver version linked.
var release = "unknown"

type problem struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

type verdict struct {
	File    string    `json:"file"`
	Name    string    `json:"name"`
	Release string    `json:"release"`
	Errors  []problem `json:"errors"`
}

// checkFile checks every CustomResourceDefinition document of a (multi-document) YAML file.
func checkFile(path string) ([]verdict, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	reader := yaml.NewYAMLReader(bufio.NewReader(file))
	var verdicts []verdict
	for {
		raw, err := reader.Read()
		if err == io.EOF {
			return verdicts, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		doc, err := yaml.ToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if string(doc) == "null" {
			continue
		}
		result, err := check(path, doc)
		if err != nil {
			return nil, err
		}
		verdicts = append(verdicts, result)
	}
}

func check(path string, doc []byte) (verdict, error) {
	out := verdict{File: path, Release: release, Errors: []problem{}}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(doc, &crd); err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	out.Name = crd.Name
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&crd)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&crd, &internal, nil); err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), &internal) {
		out.Errors = append(out.Errors, problem{Field: e.Field, Detail: e.ErrorBody()})
	}
	return out, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdcheck FILE...")
		os.Exit(2)
	}
	refused := false
	encoder := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[1:] {
		results, err := checkFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, result := range results {
			refused = refused || len(result.Errors) > 0
			if err := encoder.Encode(result); err != nil {
				os.Exit(2)
			}
		}
	}
	if refused {
		os.Exit(1)
	}
}
