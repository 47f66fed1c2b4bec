package main

// The Jobs of the deploy-phase example (fixtures/node-app with migration enabled):
//
//	demo-app migrate -configmap NAME -value V [-fail]
//	    the "database migration" of a pre Job: writes V into the ConfigMap NAME of its namespace
//	    (server-side apply, with the Pod's service account), which the new Pods then read;
//	    -fail exits 1 without writing, as a migration that breaks.
//	demo-app check -url URL -want V [-timeout 1m]
//	    the smoke test of a post Job: GETs URL until it answers with message and schema V.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func migrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ExitOnError)
	name := fs.String("configmap", "", "ConfigMap to write")
	value := fs.String("value", "", "the schema version to write")
	fail := fs.Bool("fail", false, "fail without writing")
	_ = fs.Parse(args)
	if *fail {
		return errors.New("migration failed: the schema change does not apply (-fail)")
	}
	if *name == "" || *value == "" {
		return errors.New("-configmap and -value are required")
	}
	ns, err := os.ReadFile(serviceAccountDir + "/namespace")
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": *name, "namespace": string(ns)},
		"data":     map[string]string{"version": *value, "migratedAt": time.Now().UTC().Format(time.RFC3339Nano)},
	})
	if err != nil {
		return err
	}
	path := fmt.Sprintf("/api/v1/namespaces/%s/configmaps/%s?fieldManager=demo-app-migrate&force=true", ns, *name)
	if err := apiPatch(path, body); err != nil {
		return err
	}
	log.Printf("migrate: ConfigMap %s/%s at schema %s", ns, *name, *value)
	return nil
}

// apiPatch sends a server-side apply to the API server, as the Pod's service account.
func apiPatch(path string, body []byte) error {
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("no certificate in the service account's ca.crt")
	}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	req, err := http.NewRequest(http.MethodPatch, "https://"+host+path, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/apply-patch+yaml")
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("PATCH %s: %s: %s", path, resp.Status, b)
	}
	return nil
}

func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	url := fs.String("url", "", "the application's URL")
	want := fs.String("want", "", "the message and schema it must answer with")
	timeout := fs.Duration("timeout", time.Minute, "how long to try")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var last string
	for {
		a, err := ask(ctx, *url)
		switch {
		case err != nil:
			last = err.Error()
		case a.Message == *want && a.Schema == *want:
			log.Printf("check: %s answers %q at schema %q (pod %s)", *url, a.Message, a.Schema, a.Pod)
			return nil
		default:
			last = fmt.Sprintf("answered %q at schema %q (pod %s)", a.Message, a.Schema, a.Pod)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("check: %s never answered %q within %s; last: %s", *url, *want, *timeout, last)
		case <-time.After(time.Second):
		}
	}
}

func ask(ctx context.Context, url string) (answer, error) {
	var a answer
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return a, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return a, json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a)
}
