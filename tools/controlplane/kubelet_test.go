package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBrokenImage(t *testing.T) {
	for image, want := range map[string]bool{
		"example.invalid/hello:v2-broken":           true,
		"x.invalid/a:broken":                        true,
		"x.invalid/a:v1":                            false,
		"x.invalid/broken":                          false,
		"registry:5000/broken":                      false,
		"registry:5000/a:v1-broken@sha256:0123abcd": true,
		"x.invalid/a:broken-not":                    false,
	} {
		if got := brokenImage(image); got != want {
			t.Errorf("brokenImage(%q) = %v, want %v", image, got, want)
		}
	}
}

func testPod(image string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Generation: 1},
		Spec: corev1.PodSpec{
			RestartPolicy: policy,
			Containers:    []corev1.Container{{Name: "a", Image: image}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
}

func condition(st corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// A second pass, even much later, must produce the same status: that is what
// keeps the fake kubelet from writing in a loop.
func TestDesiredStatusStable(t *testing.T) {
	for _, image := range []string{"x.invalid/a:v1", "x.invalid/a:v2-broken"} {
		pod := testPod(image, corev1.RestartPolicyAlways)
		first, _ := desiredStatus(pod, metav1.NewTime(time.Unix(1000, 0)))
		pod.Status = first
		second, _ := desiredStatus(pod, metav1.NewTime(time.Unix(5000, 0)))
		if !apiequality.Semantic.DeepEqual(first, second) {
			t.Errorf("%s: status changed on a second pass:\n%+v\n%+v", image, first, second)
		}
	}
}

func TestDesiredStatus(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	st, state := desiredStatus(testPod("x.invalid/a:v1", corev1.RestartPolicyAlways), now)
	cs := st.ContainerStatuses[0]
	if state != "Ready" || st.Phase != corev1.PodRunning || condition(st, corev1.PodReady) != corev1.ConditionTrue ||
		condition(st, corev1.ContainersReady) != corev1.ConditionTrue || !cs.Ready || cs.State.Running == nil ||
		st.PodIP == "" || st.StartTime == nil || st.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("healthy pod: state %s, status %+v", state, st)
	}

	st, state = desiredStatus(testPod("x.invalid/a:v2-broken", corev1.RestartPolicyAlways), now)
	cs = st.ContainerStatuses[0]
	if state != "CrashLoopBackOff" || st.Phase != corev1.PodRunning || condition(st, corev1.PodReady) != corev1.ConditionFalse ||
		cs.Ready || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.RestartCount < 1 {
		t.Errorf("broken pod: state %s, status %+v", state, st)
	}

	st, state = desiredStatus(testPod("x.invalid/a:v2-broken", corev1.RestartPolicyNever), now)
	if state != "Failed" || st.Phase != corev1.PodFailed || st.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("broken pod that never restarts: state %s, status %+v", state, st)
	}
}
