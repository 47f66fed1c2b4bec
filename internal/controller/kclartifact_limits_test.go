package controller

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// peakRSS returns this process's peak resident memory since the last resetPeakRSS: the
// controller runs in the test process.
func peakRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func resetPeakRSS(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// A program emitting 300 MB fails with a reason naming the bound, the controller never holds the
// output (its peak RSS stays far below it), and the last good artifact stays.
func TestHugeOutputFailsWithoutTheControllerHoldingIt(t *testing.T) {
	f := newFixture(t)
	f.commit("good", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()

	resetPeakRSS(t)
	f.commit("huge", map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "big", data.v = "x" * 300000000}]` + "\n"})
	// evaluating and serialising 300 MB takes the worker half a minute alone on two cores
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).To(Equal(kclv1.OutputLimitExceededReason))
	}, 5*time.Minute, time.Second).Should(Succeed())
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring("--kcl-max-output-size"))
	f.g.Expect(msg).To(ContainSubstring(strconv.Itoa(64 << 20)))
	peak := peakRSS(t)
	t.Logf("controller (test process) peak RSS during the huge render: %d MiB", peak>>20)
	f.g.Expect(peak).To(BeNumerically("<", 300<<20))
	sameArtifact(f.g, obj.Status.Artifact, good)
}

func TestTooManyObjectsFail(t *testing.T) {
	f := newFixture(t)
	f.commit("many", map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "c${i}"} for i in range(10001)]` + "\n"})
	obj := f.waitFor(f.create("app", nil), metav1.ConditionFalse, kclv1.OutputLimitExceededReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("more than 10000 objects"))
	f.g.Expect(obj.Status.Artifact).To(BeNil())
}

func TestInventoryIsCappedWithTheCount(t *testing.T) {
	f := newFixture(t)
	f.commit("many", map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "c${i}"} for i in range(1500)]` + "\n"})
	obj := f.waitReady(f.create("app", nil))
	f.g.Expect(obj.Status.Inventory).To(HaveLen(1000))
	f.g.Expect(obj.Status.InventoryCount).To(Equal(1500))
}

// An output just under the bound is published while the controller holds it about once (the
// engine's answer carries it twice, as YAML and JSON; nothing else copies it whole).
func TestLargeOutputIsPublishedWithBoundedMemory(t *testing.T) {
	f := newFixture(t)
	resetPeakRSS(t)
	f.commit("large", map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "c${i}", data.v = "x" * 10000} for i in range(5000)]` + "\n"})
	obj := f.waitReady(f.create("app", nil))
	peak := peakRSS(t)
	t.Logf("50 MB output in 5,000 objects: controller (test process) peak RSS %d MiB", peak>>20)
	f.g.Expect(obj.Status.InventoryCount).To(Equal(5000))
	f.g.Expect(peak).To(BeNumerically("<", 300<<20))
}
