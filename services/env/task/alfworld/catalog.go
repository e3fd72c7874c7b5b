package alfworld

// kind is one of the five ALFWorld task types.
type kind int

const (
	pickAndPlace kind = iota
	pickCleanThenPlace
	pickHeatThenPlace
	pickCoolThenPlace
	lookAtObjInLight
	numKinds
)

// String is the ALFWorld task-type name.
func (k kind) String() string {
	switch k {
	case pickAndPlace:
		return "pick_and_place"
	case pickCleanThenPlace:
		return "pick_clean_then_place"
	case pickHeatThenPlace:
		return "pick_heat_then_place"
	case pickCoolThenPlace:
		return "pick_cool_then_place"
	case lookAtObjInLight:
		return "look_at_obj_in_light"
	}
	return "unknown"
}

// Appliances: the receptacle that applies each kind's change to a held object.
const (
	sinkbasin = "sinkbasin"
	microwave = "microwave"
	fridge    = "fridge"
	desklamp  = "desklamp"
)

// appliance is the receptacle kind a task needs besides the goal receptacle ("" for none).
func (k kind) appliance() string {
	switch k {
	case pickCleanThenPlace:
		return sinkbasin
	case pickHeatThenPlace:
		return microwave
	case pickCoolThenPlace:
		return fridge
	}
	return ""
}

// change is the verb that applies the task's appliance ("clean mug 1 with sinkbasin 1").
func (k kind) change() string {
	switch k {
	case pickCleanThenPlace:
		return "clean"
	case pickHeatThenPlace:
		return "heat"
	case pickCoolThenPlace:
		return "cool"
	}
	return ""
}

// adjective is the state word of the instruction ("put a clean mug in cabinet.").
func (k kind) adjective() string {
	switch k {
	case pickCleanThenPlace:
		return "clean"
	case pickHeatThenPlace:
		return "hot"
	case pickCoolThenPlace:
		return "cool"
	}
	return ""
}

// recepSpec bounds how many receptacles of a kind a room has.
type recepSpec struct {
	kind     string
	min, max int
	openable bool
}

// objSpec says where an object kind may start, which is also where it may be asked to go.
type objSpec struct {
	kind string
	at   []string
}

// scene is a room template: its receptacles and the objects that may lie in it.
type scene struct {
	name   string
	receps []recepSpec
	objs   []objSpec
	// lampOn lists the receptacle kinds a desklamp may stand on; empty means the room has no lamp.
	lampOn []string
}

// Room sizes, kept moderate so exploring is needed but a learner is not drowned in "go to" actions.
const (
	minReceps = 6
	maxReceps = 12
)

var (
	food     = []string{"countertop", "diningtable", fridge, sinkbasin, "garbagecan", microwave}
	dishes   = []string{"countertop", "cabinet", "diningtable", fridge, microwave, "shelf", sinkbasin}
	utensils = []string{"countertop", "drawer", "diningtable", sinkbasin}
	shakers  = []string{"countertop", "cabinet", "shelf", "diningtable", "drawer"}
	smalls   = []string{"desk", "sidetable", "shelf", "dresser", "drawer", "safe"}
	decor    = []string{"shelf", "desk", "dresser", "sidetable", "cabinet"}
)

// The two room templates; tables only, never written after construction.
func scenes() [2]scene {
	return [2]scene{kitchen(), bedroom()}
}

func kitchen() scene {
	return scene{
		name: "kitchen",
		receps: []recepSpec{
			{"cabinet", 1, 5, true},
			{"coffeemachine", 0, 1, false},
			{"countertop", 1, 3, false},
			{"diningtable", 0, 1, false},
			{"drawer", 0, 3, true},
			{fridge, 1, 1, true},
			{"garbagecan", 0, 1, false},
			{microwave, 1, 1, true},
			{"shelf", 0, 2, false},
			{sinkbasin, 1, 1, false},
			{"stoveburner", 0, 2, false},
			{"toaster", 0, 1, false},
		},
		objs: []objSpec{
			{"apple", food},
			{"bowl", dishes},
			{"bread", []string{"countertop", "diningtable", fridge, microwave}},
			{"butterknife", []string{"countertop", "drawer", "diningtable"}},
			{"cup", dishes},
			{"dishsponge", []string{"countertop", sinkbasin, "cabinet", "drawer", "garbagecan"}},
			{"egg", food},
			{"fork", utensils},
			{"kettle", []string{"stoveburner", "countertop", "cabinet"}},
			{"knife", utensils},
			{"ladle", utensils},
			{"lettuce", []string{"countertop", "diningtable", fridge, sinkbasin, "garbagecan"}},
			{"mug", append([]string{"coffeemachine"}, dishes...)},
			{"pan", []string{"countertop", "cabinet", "stoveburner", "diningtable", sinkbasin}},
			{"peppershaker", shakers},
			{"plate", dishes},
			{"pot", []string{"countertop", "cabinet", "stoveburner", "diningtable", sinkbasin, fridge}},
			{"potato", food},
			{"saltshaker", shakers},
			{"soapbottle", []string{"countertop", "cabinet", "shelf", "garbagecan"}},
			{"spatula", utensils},
			{"spoon", utensils},
			{"tomato", food},
			{"winebottle", []string{"countertop", "cabinet", fridge, "diningtable", "shelf"}},
		},
	}
}

func bedroom() scene {
	return scene{
		name: "bedroom",
		receps: []recepSpec{
			{"armchair", 0, 1, false},
			{"bed", 1, 1, false},
			{"cabinet", 0, 2, true},
			{"desk", 0, 1, false},
			{"drawer", 1, 4, true},
			{"dresser", 0, 1, false},
			{"garbagecan", 0, 1, false},
			{"safe", 0, 1, true},
			{"shelf", 1, 3, false},
			{"sidetable", 0, 2, false},
			{"sofa", 0, 1, false},
		},
		objs: []objSpec{
			{"alarmclock", []string{"desk", "sidetable", "shelf", "dresser"}},
			{"book", []string{"bed", "desk", "sidetable", "shelf", "dresser", "drawer", "sofa", "armchair"}},
			{"bowl", []string{"desk", "sidetable", "shelf", "dresser"}},
			{"box", []string{"shelf", "desk", "dresser", "sidetable", "cabinet", "bed"}},
			{"cd", append([]string{"garbagecan"}, smalls...)},
			{"cellphone", []string{"bed", "desk", "sidetable", "shelf", "dresser", "drawer", "sofa", "armchair"}},
			{"creditcard", smalls},
			{"keychain", append([]string{"sofa"}, smalls...)},
			{"laptop", []string{"bed", "desk", "sofa", "armchair", "sidetable"}},
			{"mug", []string{"desk", "sidetable", "shelf", "dresser"}},
			{"pen", []string{"desk", "sidetable", "shelf", "dresser", "drawer", "garbagecan"}},
			{"pencil", []string{"desk", "sidetable", "shelf", "dresser", "drawer", "garbagecan"}},
			{"pillow", []string{"bed", "sofa", "armchair"}},
			{"remotecontrol", []string{"sofa", "armchair", "sidetable", "dresser", "desk"}},
			{"statue", decor},
			{"vase", decor},
			{"watch", smalls},
		},
		lampOn: []string{"desk", "sidetable", "dresser"},
	}
}

// targets lists the object kinds a task type may ask for in a scene (nil: any object of the scene).
func (k kind) targets() []string {
	switch k {
	case pickCleanThenPlace:
		return []string{"apple", "bowl", "cup", "egg", "fork", "knife", "ladle", "lettuce", "mug", "pan", "plate", "pot", "potato", "spatula", "spoon", "tomato"}
	case pickHeatThenPlace:
		return []string{"apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"}
	case pickCoolThenPlace:
		return []string{"apple", "bowl", "bread", "cup", "egg", "lettuce", "mug", "pan", "plate", "pot", "potato", "tomato", "winebottle"}
	}
	return nil
}
