package db

// colKind is the role a column plays in generated data and questions.
type colKind int

const (
	colKey colKind = iota // unique text naming the row ("Alice Smith", "Silent River")
	colCat                // text with few distinct values, used in WHERE filters
	colNum                // integer
)

// colSpec is one column of a table theme.
type colSpec struct {
	name string
	kind colKind
	pool []string // colCat: the values an instance draws from
	lo   int      // colNum: smallest value
	hi   int      // colNum: largest value
	step int      // colNum: values are lo + k*step
}

// keyStyle says how a theme's key values are made.
type keyStyle int

const (
	keyPerson keyStyle = iota // first and last name
	keyTitle                  // adjective and noun
	keyThing                  // material and object
	keyCode                   // letters and digits
)

// theme is a table template: its name, what one row is, and its columns (an id column comes first).
type theme struct {
	table  string
	entity string
	key    keyStyle
	cols   []colSpec
}

// themes are the table templates; a function so that no table is a mutable global.
func themes() []theme {
	return []theme{
		{"employees", "employee", keyPerson, []colSpec{
			{name: "name", kind: colKey},
			{name: "department", kind: colCat, pool: departments()},
			{name: "city", kind: colCat, pool: cities()},
			{name: "salary", kind: colNum, lo: 30000, hi: 150000, step: 500},
			{name: "hire_year", kind: colNum, lo: 2000, hi: 2024, step: 1},
			{name: "age", kind: colNum, lo: 21, hi: 65, step: 1},
		}},
		{"products", "product", keyThing, []colSpec{
			{name: "name", kind: colKey},
			{name: "category", kind: colCat, pool: []string{"Kitchen", "Garden", "Office", "Outdoor", "Bathroom", "Lighting", "Storage", "Travel"}},
			{name: "brand", kind: colCat, pool: []string{"Acme", "Nordic", "Zenith", "Orion", "Vega", "Apex", "Lumen", "Terra"}},
			{name: "price", kind: colNum, lo: 5, hi: 900, step: 1},
			{name: "stock", kind: colNum, lo: 0, hi: 400, step: 1},
			{name: "warranty_years", kind: colNum, lo: 1, hi: 10, step: 1},
		}},
		{"students", "student", keyPerson, []colSpec{
			{name: "name", kind: colKey},
			{name: "major", kind: colCat, pool: []string{"Biology", "Physics", "History", "Economics", "Chemistry", "Literature", "Mathematics", "Philosophy"}},
			{name: "hometown", kind: colCat, pool: cities()},
			{name: "age", kind: colNum, lo: 17, hi: 35, step: 1},
			{name: "credits", kind: colNum, lo: 0, hi: 240, step: 3},
			{name: "score", kind: colNum, lo: 40, hi: 100, step: 1},
		}},
		{"books", "book", keyTitle, []colSpec{
			{name: "title", kind: colKey},
			{name: "genre", kind: colCat, pool: []string{"Mystery", "Fantasy", "Romance", "Thriller", "Poetry", "Biography", "Horror", "Travel"}},
			{name: "publisher", kind: colCat, pool: []string{"Penguin", "Harper", "Orbit", "Vintage", "Faber", "Scribner", "Bantam", "Picador"}},
			{name: "pages", kind: colNum, lo: 80, hi: 950, step: 1},
			{name: "published_year", kind: colNum, lo: 1950, hi: 2024, step: 1},
			{name: "price", kind: colNum, lo: 5, hi: 80, step: 1},
		}},
		{"orders", "order", keyCode, []colSpec{
			{name: "code", kind: colKey},
			{name: "customer", kind: colCat, pool: lastNames()},
			{name: "status", kind: colCat, pool: []string{"pending", "shipped", "delivered", "cancelled", "returned", "packed"}},
			{name: "quantity", kind: colNum, lo: 1, hi: 60, step: 1},
			{name: "amount", kind: colNum, lo: 10, hi: 5000, step: 5},
			{name: "order_year", kind: colNum, lo: 2015, hi: 2024, step: 1},
		}},
		{"movies", "movie", keyTitle, []colSpec{
			{name: "title", kind: colKey},
			{name: "genre", kind: colCat, pool: []string{"Drama", "Comedy", "Action", "Horror", "Western", "Musical", "Animation", "Documentary"}},
			{name: "director", kind: colCat, pool: lastNames()},
			{name: "release_year", kind: colNum, lo: 1960, hi: 2024, step: 1},
			{name: "minutes", kind: colNum, lo: 70, hi: 210, step: 1},
			{name: "rating", kind: colNum, lo: 10, hi: 99, step: 1},
		}},
		{"cars", "car", keyCode, []colSpec{
			{name: "plate", kind: colKey},
			{name: "brand", kind: colCat, pool: []string{"Volvo", "Fiat", "Toyota", "Skoda", "Mazda", "Renault", "Honda", "Kia"}},
			{name: "color", kind: colCat, pool: []string{"Red", "Blue", "Black", "White", "Silver", "Green", "Grey", "Yellow"}},
			{name: "price", kind: colNum, lo: 2000, hi: 60000, step: 100},
			{name: "model_year", kind: colNum, lo: 1998, hi: 2024, step: 1},
			{name: "mileage", kind: colNum, lo: 0, hi: 250000, step: 500},
		}},
		{"players", "player", keyPerson, []colSpec{
			{name: "name", kind: colKey},
			{name: "team", kind: colCat, pool: []string{"Lions", "Tigers", "Eagles", "Sharks", "Wolves", "Bears", "Hawks", "Falcons"}},
			{name: "position", kind: colCat, pool: []string{"Guard", "Forward", "Center", "Keeper", "Defender", "Striker", "Winger"}},
			{name: "points", kind: colNum, lo: 0, hi: 900, step: 1},
			{name: "age", kind: colNum, lo: 18, hi: 39, step: 1},
			{name: "games", kind: colNum, lo: 1, hi: 82, step: 1},
		}},
	}
}

func departments() []string {
	return []string{"Sales", "Marketing", "Engineering", "Finance", "Support", "Legal", "Research", "Operations"}
}

func cities() []string {
	return []string{"Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Lisbon", "Oslo", "Dublin", "Warsaw"}
}

func firstNames() []string {
	return []string{"Alice", "Bruno", "Carla", "Daniel", "Elena", "Felix", "Grace", "Hugo", "Irene", "Jonas",
		"Karin", "Leo", "Maria", "Nikos", "Olga", "Pablo", "Quinn", "Rosa", "Samir", "Tara",
		"Ulrich", "Vera", "Walter", "Xenia", "Yusuf", "Zoe", "Amir", "Beatriz", "Chen", "Dmitri",
		"Esther", "Farid", "Greta", "Hana", "Igor", "Julia", "Kenji", "Lena", "Mateo", "Nadia"}
}

func lastNames() []string {
	return []string{"Smith", "Jones", "Garcia", "Muller", "Rossi", "Novak", "Tanaka", "Silva", "Kowalski", "Dubois",
		"Jensen", "Ivanova", "Okafor", "Haddad", "Larsen", "Moreau", "Nguyen", "Petrov", "Quist", "Ramos",
		"Schmidt", "Torres", "Varga", "Weber", "Yilmaz", "Ziegler", "Becker", "Castro", "Fischer", "Horvat",
		"Keller", "Lopez", "Meyer", "Nilsson", "Ortiz", "Popescu", "Reyes", "Santos", "Vogel", "Wagner"}
}

func titleWords() (adjectives, nouns []string) {
	return []string{"Silent", "Golden", "Hidden", "Broken", "Crimson", "Distant", "Frozen", "Gentle", "Hollow", "Lonely",
			"Midnight", "Northern", "Painted", "Quiet", "Restless", "Scarlet", "Secret", "Shining", "Wild", "Winter"},
		[]string{"River", "Garden", "Mirror", "Harbor", "Forest", "Tower", "Island", "Valley", "Letter", "Bridge",
			"Shadow", "Station", "Voyage", "Empire", "Orchard", "Compass", "Lantern", "Meadow", "Signal", "Castle"}
}

func thingWords() (materials, objects []string) {
	return []string{"Steel", "Oak", "Glass", "Copper", "Linen", "Bamboo", "Ceramic", "Leather", "Wool", "Marble", "Cedar", "Brass"},
		[]string{"Kettle", "Lamp", "Chair", "Desk", "Mug", "Blanket", "Vase", "Shelf", "Clock", "Basket", "Bowl", "Stool"}
}
