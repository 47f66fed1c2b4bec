package fluxkcl

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func (a *app) eventsCommand() *cobra.Command {
	var watchEvents bool
	cmd := &cobra.Command{
		Use:   "events [name]",
		Short: "Show the events of KCLArtifacts and of what they generate",
		Long: `Show the events of KCLArtifacts, their ExternalArtifacts and their generated Kustomizations,
merged and sorted by time, as flux events prints them (flux events refuses --for KCLArtifact/...).
With --watch, new events are printed until --timeout.`,
		Example: `  flux kcl events podinfo -n apps
  flux kcl events podinfo -n apps --watch --timeout 10m`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			items, _, err := a.listArtifacts(ctx, args)
			if err != nil {
				return err
			}
			objects := eventObjects(items)
			if watchEvents {
				return a.watchEvents(ctx, objects)
			}
			return a.printEvents(ctx, objects)
		},
	}
	cmd.Flags().BoolVarP(&watchEvents, "watch", "w", false, "print new events as they come, until --timeout")
	return cmd
}

// objectKey is an event's involved object: namespace, kind, name.
type objectKey struct{ namespace, kind, name string }

// eventObjects are the KCLArtifacts and what they generate.
func eventObjects(items []kclv1.KCLArtifact) map[objectKey]bool {
	set := map[objectKey]bool{}
	for i := range items {
		it := &items[i]
		set[objectKey{it.Namespace, kclv1.KCLArtifactKind, it.Name}] = true
		if r := it.Status.ExternalArtifactRef; r != nil {
			set[objectKey{orNamespace(r.Namespace, it.Namespace), externalGVK.Kind, r.Name}] = true
		}
		for _, ks := range generatedKustomizations(it) {
			set[objectKey{it.Namespace, kustomizationGVK.Kind, ks}] = true
		}
	}
	return set
}

func orNamespace(ns, def string) string {
	if ns == "" {
		return def
	}
	return ns
}

func (a *app) printEvents(ctx context.Context, objects map[objectKey]bool) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(a.namespace())); err != nil {
		return err
	}
	var events []corev1.Event
	for _, e := range list.Items {
		if objects[involved(e)] {
			events = append(events, e)
		}
	}
	if len(events) == 0 {
		a.log.Failuref("No events found in %s namespace.", namespaceText(a.namespace()))
		return nil
	}
	sort.SliceStable(events, func(i, j int) bool { return eventTime(events[i]).Before(eventTime(events[j])) })
	rows := make([][]string, 0, len(events))
	for _, e := range events {
		rows = append(rows, a.eventRow(e))
	}
	return printTable(a.stdout, a.eventHeaders(), rows)
}

// watchEvents prints the events of objects as they come, until the context ends (flux events
// --watch ends at --timeout too, without an error).
func (a *app) watchEvents(ctx context.Context, objects map[objectKey]bool) error {
	cfg, err := a.restConfig()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		return err
	}
	w, err := c.Watch(ctx, &corev1.EventList{}, client.InNamespace(a.namespace()))
	if err != nil {
		return err
	}
	header := a.eventHeaders()
	return eachChange(ctx, w, func(obj runtime.Object) error {
		e, isEvent := obj.(*corev1.Event)
		if !isEvent || !objects[involved(*e)] {
			return nil
		}
		err := printTable(a.stdout, header, [][]string{a.eventRow(*e)})
		header = nil
		return err
	})
}

// eachChange calls handle with each object w adds or modifies, until ctx ends or w closes; flux's
// --watch ends at --timeout without an error.
func eachChange(ctx context.Context, w watch.Interface, handle func(runtime.Object) error) error {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if err := handle(ev.Object); err != nil {
				return err
			}
		}
	}
}

func involved(e corev1.Event) objectKey {
	return objectKey{e.InvolvedObject.Namespace, e.InvolvedObject.Kind, e.InvolvedObject.Name}
}

func (a *app) eventHeaders() []string {
	h := []string{"Last seen", "Type", "Reason", "Object", "Message"}
	if a.allNamespaces {
		h = append([]string{"Namespace"}, h...)
	}
	return h
}

func (a *app) eventRow(e corev1.Event) []string {
	row := []string{lastSeen(e), e.Type, e.Reason, e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, e.Message}
	if a.allNamespaces {
		row = append([]string{e.Namespace}, row...)
	}
	return row
}

// eventTime and lastSeen are flux events' (cmd/flux/events.go), so that the order and the
// LAST SEEN column read the same.
func eventTime(e corev1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

func lastSeen(e corev1.Event) string {
	first := since(e.EventTime.Time)
	if e.EventTime.IsZero() {
		first = since(e.FirstTimestamp.Time)
	}
	switch {
	case e.Series != nil:
		return fmt.Sprintf("%s (x%d over %s)", since(e.Series.LastObservedTime.Time), e.Series.Count, first)
	case e.Count > 1:
		return fmt.Sprintf("%s (x%d over %s)", since(e.LastTimestamp.Time), e.Count, first)
	}
	return first
}

func since(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t))
}
