DROP TABLE IF EXISTS patient;
CREATE TABLE patient
(
    uniquepid VARCHAR(10) NOT NULL,
    patientunitstayid INT NOT NULL PRIMARY KEY,
    gender VARCHAR(25) NOT NULL,
    age VARCHAR(10) NOT NULL,
    hospitaladmittime TIMESTAMP(0) NOT NULL,
    hospitaldischargestatus VARCHAR(10)
) ;

DROP TABLE IF EXISTS lab;
CREATE TABLE lab
(
    labid INT NOT NULL PRIMARY KEY,
    patientunitstayid INT NOT NULL,
    labname VARCHAR(256) NOT NULL,
    labresult NUMERIC(11,4) NOT NULL,
    labresulttime TIMESTAMP(0) NOT NULL
) ;

DROP TABLE IF EXISTS medication;
CREATE TABLE medication
(
    medicationid INT NOT NULL PRIMARY KEY,
    patientunitstayid INT NOT NULL,
    drugname VARCHAR(220) NOT NULL,
    routeadmin VARCHAR(120) NOT NULL,
    drugstarttime TIMESTAMP(0)
) ;
