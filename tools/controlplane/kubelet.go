package main

// A fake kubelet: there is no scheduler and no container runtime here, so Pods
// would stay Pending forever and no Deployment could become Available. In
// namespaces that opt in with the label below, this loop reports Pods the way a
// kubelet would: running and ready, or crash-looping when an image tag ends
// with "broken". Pods that run to completion (restartPolicy Never or OnFailure,
// as every Job's Pods are) complete at once: phase Succeeded, containers
// terminated with exit code 0; with a "broken" image a Never Pod fails (exit
// code 1) and an OnFailure Pod crash-loops (a kubelet restarts it in place), so
// the real Job controller marks the Job Complete or Failed. Other namespaces
// are left alone, so tests that simulate pod status themselves are not
// disturbed.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	fakeKubeletLabel = "pallet.dev/fake-kubelet"
	fakeKubeletOn    = "on"
	// Pod status writers; the workqueue never hands one key to two workers at once.
	fakeKubeletWorkers = 16
)

type fakeKubelet struct {
	cs     kubernetes.Interface
	pods   corelisters.PodLister
	podIdx cache.Indexer
	nss    corelisters.NamespaceLister
	queue  workqueue.TypedRateLimitingInterface[string]
}

// runFakeKubelet blocks until ctx is done.
func runFakeKubelet(ctx context.Context, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "pallet-fake-kubelet"
	// Bringing up thousands of pods at once (the scale benchmark) would otherwise crawl at
	// client-go's default 5 qps; a real node's kubelet is not the bottleneck either.
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	podInf := f.Core().V1().Pods()
	nsInf := f.Core().V1().Namespaces()
	k := &fakeKubelet{
		cs:     cs,
		pods:   podInf.Lister(),
		podIdx: podInf.Informer().GetIndexer(),
		nss:    nsInf.Lister(),
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	defer k.queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	// Labelling a namespace after its pods exist must still bring them up.
	if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.enqueueNamespace(obj) },
		UpdateFunc: func(old, obj any) {
			if old.(*corev1.Namespace).Labels[fakeKubeletLabel] != obj.(*corev1.Namespace).Labels[fakeKubeletLabel] {
				k.enqueueNamespace(obj)
			}
		},
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInf.Informer().HasSynced, nsInf.Informer().HasSynced) {
		return ctx.Err()
	}
	klog.InfoS("fake kubelet running", "namespaceLabel", fakeKubeletLabel+"="+fakeKubeletOn)
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	// Several workers, as many nodes would: one writes a pod status at a time.
	var workers sync.WaitGroup
	for range fakeKubeletWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for k.next(ctx) {
			}
		}()
	}
	workers.Wait()
	return nil
}

func (k *fakeKubelet) enqueueNamespace(obj any) {
	ns := obj.(*corev1.Namespace)
	if ns.Labels[fakeKubeletLabel] != fakeKubeletOn {
		return
	}
	objs, _ := k.podIdx.ByIndex(cache.NamespaceIndex, ns.Name)
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			k.queue.Add(key)
		}
	}
}

func (k *fakeKubelet) next(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil {
		// Conflicts are normal (the controllers write pods too); retry with backoff.
		if !apierrors.IsConflict(err) {
			utilruntime.HandleErrorWithContext(ctx, err, "fake kubelet sync failed", "pod", key)
		}
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *fakeKubelet) sync(ctx context.Context, key string) error {
	nsName, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ns, err := k.nss.Get(nsName)
	if err != nil || ns.Labels[fakeKubeletLabel] != fakeKubeletOn {
		return nil
	}
	pod, err := k.pods.Pods(nsName).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		// A kubelet confirms a graceful deletion once the containers are gone;
		// without that, rollouts and namespace deletion would wait out the grace
		// period. (Unbound pods, the usual case here, are removed by the
		// apiserver at once.) A grace period of 0 means it was confirmed and
		// only finalizers hold the pod.
		if g := pod.DeletionGracePeriodSeconds; g != nil && *g == 0 {
			return nil
		}
		uid := pod.UID
		err := k.cs.CoreV1().Pods(nsName).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		} else if err != nil {
			return err
		}
		klog.InfoS("fake kubelet: pod deletion confirmed", "pod", key)
		return nil
	}
	// Finished pods stay finished, as on a real node.
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	status, state := desiredStatus(pod, metav1.NewTime(time.Now()))
	// Writing only on a difference keeps the write from feeding back into the watch.
	if apiequality.Semantic.DeepEqual(status, pod.Status) {
		return nil
	}
	updated := pod.DeepCopy()
	updated.Status = status
	if _, err := k.cs.CoreV1().Pods(nsName).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	klog.InfoS("fake kubelet: pod status", "pod", key, "state", state)
	return nil
}

// brokenImage reports whether the image's tag ends with "broken", e.g.
// example.invalid/hello:v2-broken.
func brokenImage(image string) bool {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return false // no tag (a registry port is not one)
	}
	return strings.HasSuffix(image[i+1:], "broken")
}

// podIP derives a stable address from the UID, so recomputing the status
// never changes it.
func podIP(uid types.UID) string {
	h := fnv.New32a()
	h.Write([]byte(uid))
	v := h.Sum32()
	return fmt.Sprintf("10.244.%d.%d", (v>>8)&0xff, v&0xfd+1)
}

// desiredStatus is the status a kubelet would report for pod, and a word for
// the log. Timestamps and counters already present are kept while the state
// they describe is unchanged, so applying it to its own result changes nothing.
func desiredStatus(pod *corev1.Pod, now metav1.Time) (corev1.PodStatus, string) {
	// Start from the stored status so fields this fake does not model (QoS
	// class, resource claims, resize) pass through untouched.
	st := *pod.Status.DeepCopy()
	gen := pod.Generation
	st.ObservedGeneration = gen
	st.Phase = corev1.PodRunning
	st.Reason, st.Message = "", ""
	st.HostIP = "127.0.0.1"
	st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	if st.PodIP == "" {
		st.PodIP = podIP(pod.UID)
	}
	st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}

	initBroken, initName := false, ""
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		old := findStatus(pod.Status.InitContainerStatuses, c.Name)
		var cs corev1.ContainerStatus
		switch {
		case initBroken:
			cs = waiting(c, old, "PodInitializing", "")
		case brokenImage(c.Image):
			initBroken, initName = true, c.Name
			cs = crashLooping(pod, c, old, now)
		default:
			// Init containers ran to completion; a kubelet reports them ready.
			cs = baseStatus(c, old)
			cs.Ready = true
			cs.Started = new(bool)
			if old != nil && old.State.Terminated != nil && old.State.Terminated.Reason == "Completed" {
				cs.State = old.State
			} else {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: cs.ContainerID,
				}}
			}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}

	// Pods that run to completion: every Job's, and bare Pods that do not restart.
	toCompletion := pod.Spec.RestartPolicy == corev1.RestartPolicyNever ||
		pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure
	var unready []string
	failed, completed := false, 0
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		old := findStatus(pod.Status.ContainerStatuses, c.Name)
		var cs corev1.ContainerStatus
		switch {
		case initBroken:
			cs = waiting(c, old, "PodInitializing", "")
		case brokenImage(c.Image) && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			// Nothing restarts it: the container ends in error and so does the pod.
			cs = baseStatus(c, old)
			cs.Started = new(bool)
			if old != nil && old.State.Terminated != nil {
				cs.State = old.State
			} else {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now, ContainerID: cs.ContainerID,
				}}
			}
			failed = true
		case brokenImage(c.Image):
			cs = crashLooping(pod, c, old, now)
		case toCompletion:
			// The container ran and exited 0; it is not ready (it is not running).
			cs = baseStatus(c, old)
			cs.Started = new(bool)
			if old != nil && old.State.Terminated != nil && old.State.Terminated.ExitCode == 0 {
				cs.State = old.State
			} else {
				cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: cs.ContainerID,
				}}
			}
			completed++
		default:
			cs = baseStatus(c, old)
			cs.Ready = true
			cs.Started = ptrTrue()
			if old != nil && old.State.Running != nil {
				cs.State = old.State
			} else {
				cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
			}
		}
		if !cs.Ready && cs.State.Terminated == nil {
			unready = append(unready, c.Name)
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	state := "Ready"
	if initBroken {
		st.Phase = corev1.PodPending
		state = "Init:CrashLoopBackOff"
	} else if failed {
		st.Phase = corev1.PodFailed
		state = "Failed"
	} else if toCompletion && completed == len(pod.Spec.Containers) {
		st.Phase = corev1.PodSucceeded
		state = "Succeeded"
	} else if len(unready) > 0 {
		state = "CrashLoopBackOff"
	}
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, ObservedGeneration: gen, LastTransitionTime: now}
		if !ok {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, msg
		}
		for _, o := range pod.Status.Conditions {
			if o.Type == t && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	notReady := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	readyReason, ready := "ContainersNotReady", len(unready) == 0
	if st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed {
		// A finished Pod is not ready, as a kubelet reports it.
		readyReason, ready, notReady = "PodCompleted", false, ""
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, true, "", ""),
		cond(corev1.PodInitialized, !initBroken, "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", initName)),
		cond(corev1.PodReady, ready, readyReason, notReady),
		cond(corev1.ContainersReady, ready, readyReason, notReady),
		cond(corev1.PodScheduled, true, "", ""),
	}
	// Conditions other components own (readiness gates, disruption targets) stay.
	for _, o := range pod.Status.Conditions {
		switch o.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled:
		default:
			st.Conditions = append(st.Conditions, o)
		}
	}
	return st, state
}

func ptrTrue() *bool { t := true; return &t }

func findStatus(list []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// baseStatus fills in the identity of a container's status: stable fake
// container and image IDs, and the restart count so far.
func baseStatus(c corev1.Container, old *corev1.ContainerStatus) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     strings.SplitN(c.Image, "@", 2)[0] + "@sha256:" + hexHash(c.Image),
		ContainerID: "containerd://" + hexHash(c.Name+"/"+c.Image),
	}
	if old != nil {
		cs.RestartCount = old.RestartCount
		cs.ContainerID = old.ContainerID
		cs.LastTerminationState = old.LastTerminationState
		if old.Image != c.Image {
			cs.ContainerID = "containerd://" + hexHash(c.Name+"/"+c.Image)
		}
	}
	return cs
}

func waiting(c corev1.Container, old *corev1.ContainerStatus, reason, msg string) corev1.ContainerStatus {
	cs := baseStatus(c, old)
	cs.Started = new(bool)
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	return cs
}

// crashLooping is a container that exited with an error and is in back-off,
// as a kubelet shows it after the first restart.
func crashLooping(pod *corev1.Pod, c corev1.Container, old *corev1.ContainerStatus, now metav1.Time) corev1.ContainerStatus {
	cs := waiting(c, old, "CrashLoopBackOff",
		fmt.Sprintf("back-off 10s restarting failed container=%s pod=%s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID))
	if cs.RestartCount < 1 {
		cs.RestartCount = 1
	}
	if t := cs.LastTerminationState.Terminated; t == nil || t.Reason != "Error" {
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now, ContainerID: cs.ContainerID,
		}}
	}
	return cs
}

func hexHash(s string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(s)))
}
