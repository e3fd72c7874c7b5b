package kg

// Entity types of the generated knowledge graphs.
const (
	film    = "film"
	person  = "person"
	city    = "city"
	company = "company"
	country = "country"
)

// plural names a set of entities of one type in questions and observations.
func plural(typ string) string {
	switch typ {
	case person:
		return "people"
	case city:
		return "cities"
	case company:
		return "companies"
	case country:
		return "countries"
	}
	return typ + "s"
}

// relation is one directed edge kind. Its name is "<from>.<key>", and the question phrase of every relation
// uses that relation's own keyword, never another's, so a question's words point at the relations to follow.
type relation struct {
	name     string
	from, to string
	inverse  string // the name of the relation that walks the edge backwards
	phrase   string // the objects of the relation, with %s standing for the subject
}

// relations is the schema, in the order get_relations lists them. Each pair is one edge kind both ways.
func relations() []relation {
	return []relation{
		{"film.directed_by", film, person, "person.filmography", "the people who directed %s"},
		{"film.produced_by", film, company, "company.productions", "the companies that produced %s"},
		{"film.starring", film, person, "person.acted_in", "the actors starring in %s"},
		{"film.filmed_in", film, city, "city.filming_location_of", "the city where %s was filmed"},
		{"person.filmography", person, film, "film.directed_by", "the films in the filmography of %s"},
		{"person.acted_in", person, film, "film.starring", "the films that %s acted in"},
		{"person.born_in", person, city, "city.natives", "the city where %s was born"},
		{"person.nationality", person, country, "country.citizens", "the nationality of %s"},
		{"person.works_for", person, company, "company.employees", "the companies that %s works for"},
		{"city.natives", city, person, "person.born_in", "the natives of %s"},
		{"city.located_in", city, country, "country.contains", "the country where %s is located"},
		{"city.headquarters_of", city, company, "company.headquartered_in", "the companies that have their headquarters in %s"},
		{"city.filming_location_of", city, film, "film.filmed_in", "the films whose filming location is %s"},
		{"company.productions", company, film, "film.produced_by", "the productions of %s"},
		{"company.employees", company, person, "person.works_for", "the employees of %s"},
		{"company.headquartered_in", company, city, "city.headquarters_of", "the city where %s is headquartered"},
		{"country.contains", country, city, "city.located_in", "the cities that %s contains"},
		{"country.citizens", country, person, "person.nationality", "the citizens of %s"},
	}
}

// attribute is a numeric property of every entity of one type; values are distinct within an instance,
// so argmax and argmin always pick exactly one entity.
type attribute struct {
	name   string
	typ    string
	phrase string // as questions say it: "the highest <phrase>"
	lo, hi int    // value range
	unit   string // shown after values, may be empty
}

// attributes lists every type's attributes in the order get_attributes shows them.
func attributes() []attribute {
	return []attribute{
		{"film.release_year", film, "release year", 1950, 2024, ""},
		{"film.box_office", film, "box office", 1, 900, "million dollars"},
		{"film.runtime", film, "runtime", 75, 210, "minutes"},
		{"person.birth_year", person, "birth year", 1930, 2005, ""},
		{"person.height", person, "height", 150, 205, "cm"},
		{"city.population", city, "population", 20, 9000, "thousand"},
		{"city.elevation", city, "elevation", 0, 2500, "m"},
		{"company.revenue", company, "revenue", 5, 5000, "million dollars"},
		{"company.founding_year", company, "founding year", 1850, 2020, ""},
		{"country.gdp", country, "gdp", 10, 9000, "billion dollars"},
		{"country.land_area", country, "land area", 10, 9000, "thousand km2"},
	}
}

// pools are the name pools. Every name is a pairing of two lists: a first and a last name, an adjective
// and a noun, or a stem and a suffix, which gives hundreds of names per type.
type pools struct {
	filmFirst, filmSecond     []string
	firstNames, lastNames     []string
	cityStems, citySuffixes   []string
	companyStems, companyEnds []string
	countryStems, countryEnds []string
}

func namePools() pools {
	return pools{
		filmFirst: []string{"Silent", "Crimson", "Broken", "Hidden", "Last", "Golden", "Iron", "Frozen", "Burning", "Distant",
			"Electric", "Midnight", "Wild", "Quiet", "Savage", "Hollow", "Velvet", "Glass", "Paper", "Bitter",
			"Lunar", "Scarlet", "Restless", "Endless", "Secret", "Northern", "Fading", "Shattered", "Painted", "Wandering"},
		filmSecond: []string{"Harbor", "Horizon", "Empire", "Garden", "Signal", "Orchard", "Tide", "Frontier", "Mirror", "Lantern",
			"Voyage", "Canyon", "Kingdom", "Echo", "Meridian", "Compass", "River", "Summit", "Carnival", "Station",
			"Archive", "Monsoon", "Parade", "Labyrinth", "Eclipse", "Covenant", "Outpost", "Reverie", "Serenade", "Citadel"},
		firstNames: []string{"Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas",
			"Kira", "Luca", "Mara", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sven", "Tara",
			"Umar", "Vera", "Wim", "Xenia", "Yusuf", "Zora", "Anika", "Boris", "Celia", "Dario",
			"Emil", "Freya", "Goran", "Hana", "Ivo", "Juno", "Kenji", "Lena", "Milo", "Nadia"},
		lastNames: []string{"Abbott", "Brandt", "Castell", "Dorsey", "Ekberg", "Falk", "Garrow", "Holm", "Ibarra", "Jansen",
			"Kovac", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quill", "Rasmussen", "Santoro", "Thorne",
			"Ulrich", "Varga", "Whitlock", "Yilmaz", "Zeller", "Achebe", "Bianchi", "Cortez", "Delacroix", "Engel",
			"Fischer", "Grimaldi", "Haddad", "Ivanova", "Kaur", "Laine", "Mbeki", "Nakamura", "Oyelaran", "Pereira"},
		cityStems: []string{"Ash", "Bel", "Cor", "Dun", "Est", "Far", "Glen", "Hal", "Isen", "Jor", "Kes", "Lor", "Mar",
			"Nor", "Ost", "Pell", "Quar", "Raven", "Salt", "Tam", "Ulver", "Val", "West", "Yar", "Zen", "Bright",
			"Cald", "Dover", "Ember", "Fair", "Grey", "High", "Kings", "Lake", "Mill", "Oak"},
		citySuffixes: []string{"bury", "mora", "wick", "mere", "haven", "port", "holm", "ford", "field", "gate", "ridge", "stead"},
		companyStems: []string{"Vel", "Nor", "Hel", "Quan", "Lum", "Pyl", "Cor", "Zeph", "Tan", "Mir", "Kes", "Arc", "Sol",
			"Nim", "Fer", "Obs", "Gray", "Aur", "Bas", "Cin", "Dyn", "Ev", "Ful", "Gal", "Hav", "Jov"},
		companyEnds: []string{"trix", "cast", "ion", "ara", "line", "vex", "dyne", "ium", "tek", "ora"},
		countryStems: []string{"Ald", "Belv", "Cest", "Drav", "Esk", "Falm", "Gald", "Hest", "Ilyr", "Jorv", "Kald", "Lum",
			"Mord", "Norv", "Ostr", "Pell", "Rov", "Sard", "Tolv", "Valm", "Brenn", "Dorn", "Elb", "Fenn", "Grav"},
		countryEnds: []string{"ia", "land", "ova", "aria"},
	}
}

// typeSize is how many entities of each type a graph holds.
func typeSize(typ string) int {
	switch typ {
	case country:
		return 3
	case city:
		return 6
	case company:
		return 5
	case person:
		return 12
	}
	return 10 // films
}
