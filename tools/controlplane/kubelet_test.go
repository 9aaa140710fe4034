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

// Pods that run to completion (every Job's) complete at once, and stay so on later passes.
func TestDesiredStatusRunToCompletion(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
		pod := testPod("x.invalid/a:v1", policy)
		st, state := desiredStatus(pod, now)
		term := st.ContainerStatuses[0].State.Terminated
		if state != "Succeeded" || st.Phase != corev1.PodSucceeded || term == nil || term.ExitCode != 0 ||
			term.Reason != "Completed" || condition(st, corev1.PodReady) != corev1.ConditionFalse {
			t.Errorf("%s: completing pod: state %s, status %+v", policy, state, st)
		}
		pod.Status = st
		again, _ := desiredStatus(pod, metav1.NewTime(time.Unix(5000, 0)))
		if !apiequality.Semantic.DeepEqual(st, again) {
			t.Errorf("%s: completed status changed on a second pass:\n%+v\n%+v", policy, st, again)
		}
	}

	// A broken image in a Pod that restarts on failure crash-loops in place, as on a node; the Job
	// controller counts its restarts against the backoff limit.
	st, state := desiredStatus(testPod("x.invalid/a:v2-broken", corev1.RestartPolicyOnFailure), now)
	cs := st.ContainerStatuses[0]
	if state != "CrashLoopBackOff" || st.Phase != corev1.PodRunning || cs.RestartCount < 1 ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("broken OnFailure pod: state %s, status %+v", state, st)
	}

	// A broken image in a Pod that never restarts: exit code 1, phase Failed, not ready.
	st, state = desiredStatus(testPod("x.invalid/a:v2-broken", corev1.RestartPolicyNever), now)
	if term := st.ContainerStatuses[0].State.Terminated; state != "Failed" || term == nil || term.ExitCode != 1 ||
		condition(st, corev1.PodReady) != corev1.ConditionFalse {
		t.Errorf("broken Never pod: state %s, status %+v", state, st)
	}
}
